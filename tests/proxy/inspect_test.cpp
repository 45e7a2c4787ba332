// TLS inspection and credential injection, end to end through the proxy: a client CONNECTs,
// handshakes against the leaf the proxy mints, and sends HTTP/1.1 inside the tunnel to a
// loopback HTTPS upstream that records what it received. Every test asserts what the client
// saw and the audit row; every test also proves the secret values reached neither the client,
// nor an audit event, nor the proxy's log.
#include <gtest/gtest.h>
#include <openssl/x509_vfy.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "https_upstream.hpp"
#include "proxy_test_util.hpp"
#include "sluice/audit/event_text.hpp"
#include "sluice/policy/explain.hpp"
#include "sluice/policy/loader.hpp"
#include "sluice/policy/secrets.hpp"
#include "sluice/proxy/certificate_authority.hpp"
#include "sluice/proxy/proxy.hpp"
#include "tls_client.hpp"

namespace sluice::tls_testing {
namespace {

namespace fs = std::filesystem;
using proxy::testing::FakeSink;

constexpr const char* kSecret = "sk-live-7f3c9a1e5b2d48c6a0e9f1d3b5c7a9e1";
constexpr const char* kPlainSecret = "pk-plain-94e2b7d1c3a5f6080b1d";

// The proxy's logger, registered before the proxy creates its own, at trace level so every
// line it could ever write is captured and searched for secrets.
std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> logSink() {
  static auto sink = [] {
    auto s = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(100000);
    auto logger = std::make_shared<spdlog::logger>("proxy", s);
    logger->set_level(spdlog::level::trace);
    spdlog::register_logger(logger);
    return s;
  }();
  return sink;
}

class LogEnvironment : public ::testing::Environment {
 public:
  void SetUp() override { logSink(); }
};
const auto* const kLogEnv = ::testing::AddGlobalTestEnvironment(new LogEnvironment);

std::string policyYaml() {
  return R"(apiVersion: sluice/v1
kind: Workflow
name: tls-test
egress:
  rules:
    - id: api
      action: allow
      hosts: [api.test]
      ports: ["1-65535"]
      allow_private: true
      cidrs: ["127.0.0.0/8"]
      tls: inspect
      methods: [GET, POST]
      paths: ["/v1/*", "/ws"]
      inject:
        headers:
          Authorization: "Bearer ${secret:api_token}"
        placeholder_env: API_TOKEN
    - id: api-admin
      action: deny
      hosts: [api.test]
      ports: ["1-65535"]
      paths: ["/v1/admin/*"]
    - id: other
      action: allow
      hosts: [other.test]
      ports: ["1-65535"]
      allow_private: true
      cidrs: ["127.0.0.0/8"]
      tls: inspect
    - id: loopback-ip
      action: allow
      cidrs: ["127.0.0.0/8"]
      allow_private: true
      ports: ["1-65535"]
      tls: inspect
    - id: plain
      action: allow
      hosts: [plain.test]
      ports: ["1-65535"]
      allow_private: true
      cidrs: ["127.0.0.0/8"]
      inject:
        headers:
          X-Api-Key: "${secret:plain_key}"
    - id: plain-ok
      action: allow
      hosts: [plainok.test]
      ports: ["1-65535"]
      allow_private: true
      cidrs: ["127.0.0.0/8"]
      allow_plaintext_credentials: true
      inject:
        headers:
          X-Api-Key: "${secret:plain_key}"
)";
}

bool contains(const std::string& hay, const std::string& needle) {
  return hay.find(needle) != std::string::npos;
}

std::string eventText(const audit::ConnectionEvent& e) {
  return e.id + "|" + e.execution_id + "|" + e.workflow + "|" + e.policy_sha256 + "|" +
         std::string(audit::textOf(e.kind)) + "|" + e.host + "|" + e.resolved_ip + "|" +
         std::string(audit::textOf(e.decision)) + "|" + e.rule_id + "|" + e.reason + "|" +
         e.detail + "|" + std::string(audit::textOf(e.tls));
}

std::string eventText(const audit::RequestEvent& e) {
  std::string s = e.connection_id + "|" + e.execution_id + "|" + e.workflow + "|" + e.method + "|" +
                  e.host + "|" + e.path + "|" + std::string(audit::textOf(e.decision)) + "|" +
                  e.rule_id + "|" + e.reason;
  for (const auto& n : e.injected_secrets) s += "|" + n;
  return s;
}

class InspectTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sluice-tls-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ca_file_ = dir_ / "upstream-ca.pem";
    std::ofstream(ca_file_) << pki_.caPem();

    up_ = std::make_unique<HttpsUpstream>(pki_.leaf({"api.test", "other.test"}));
    plain_ = std::make_unique<HttpsUpstream>(std::nullopt);

    auto ca = proxy::CertificateAuthority::createEphemeral("sluice inspection test CA");
    ASSERT_TRUE(ca) << ca.error();
    ca_ = *ca;

    auto w = policy::parseWorkflow(policyYaml(), "tls-test.yaml");
    ASSERT_TRUE(w) << w.error().str();
    workflow_ = std::make_shared<const policy::Workflow>(std::move(*w));
    matcher_ = policy::Matcher::compile(workflow_);
    placeholders_ = proxy::makePlaceholders(*workflow_);
    secrets_ = policy::makeSecretStore({{"api_token", kSecret}, {"plain_key", kPlainSecret}});

    sink_ = std::make_shared<FakeSink>();
    auto resolver = std::make_shared<proxy::StaticResolver>();
    auto lo = *policy::parseIpLiteral("127.0.0.1");
    for (const char* h : {"api.test", "other.test", "plain.test", "plainok.test"}) {
      resolver->add(h, {lo});
    }
    proxy::ProxyOptions o;
    o.threads = threads();
    o.parked_upstream_idle = parkedIdle();
    o.header_timeout = std::chrono::milliseconds(2000);
    o.idle_timeout = std::chrono::milliseconds(30000);
    o.connect_timeout = std::chrono::milliseconds(2000);
    o.upstream_timeout = std::chrono::milliseconds(3000);
    o.drain_timeout = std::chrono::milliseconds(200);
    if (withCa()) o.ca = ca_;
    o.upstream_ca_files = {ca_file_.string()};
    auto p = proxy::Proxy::create(std::move(o), sink_, resolver);
    ASSERT_TRUE(p) << p.error().message;
    proxy_ = std::move(*p);
    proxy::ListenerIdentity id;
    id.execution_id = "exec-tls";
    id.matcher = matcher_;
    if (withSecrets()) id.secrets = secrets_;
    id.placeholders = placeholders_;
    auto port = proxy_->listen("127.0.0.1", 0, std::move(id));
    ASSERT_TRUE(port) << port.error().message;
    port_ = *port;
    proxy_->start();
  }

  virtual bool withCa() { return true; }
  virtual bool withSecrets() { return true; }
  // Two I/O threads: every connection on a strand of its own.
  virtual unsigned threads() const { return 2; }
  virtual std::chrono::milliseconds parkedIdle() const { return std::chrono::seconds(4); }

  void TearDown() override {
    if (proxy_) proxy_->stop();
    expectNoSecretAnywhere();
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }

  // The secret values in no audit event, no byte any client received, no log line.
  void expectNoSecretAnywhere() {
    if (!sink_) return;
    for (const char* secret : {kSecret, kPlainSecret}) {
      for (const auto& e : sink_->connections()) {
        EXPECT_FALSE(contains(eventText(e), secret)) << "connection row: " << eventText(e);
      }
      for (const auto& e : sink_->requests()) {
        EXPECT_FALSE(contains(eventText(e), secret)) << "request row: " << eventText(e);
      }
      EXPECT_FALSE(contains(transcript_, secret)) << "a response the client saw holds a secret";
      for (const auto& line : logSink()->last_formatted()) {
        EXPECT_FALSE(contains(line, secret)) << "log line: " << line;
      }
    }
  }

  std::string apiAuthority() const { return "api.test:" + std::to_string(up_->port()); }
  std::string otherAuthority() const { return "other.test:" + std::to_string(up_->port()); }

  // CONNECT + TLS handshake (SNI = verify host = `host`) through the proxy listening on
  // `proxy_port` (0: the fixture's); null (test failed) otherwise.
  std::unique_ptr<ProxyClient> tunnel(const std::string& host, std::uint16_t port,
                                      const std::string& sni = "<host>",
                                      std::uint16_t proxy_port = 0) {
    auto c = std::make_unique<ProxyClient>(proxy_port ? proxy_port : port_, &transcript_);
    EXPECT_TRUE(c->ok());
    auto r = c->connect(host + ":" + std::to_string(port));
    EXPECT_EQ(r.status, 200) << r.body;
    if (r.status != 200) return nullptr;
    std::string why;
    bool ok = c->handshake(ca_->certificate(), sni == "<host>" ? host : sni, host, &why);
    EXPECT_TRUE(ok) << why;
    if (!ok) return nullptr;
    return c;
  }

  // Every request the upstream got carries the injected credential, over SNI api.test.
  static void expectInjectedOverApiSni(const std::vector<ReceivedRequest>& got) {
    for (const auto& g : got) {
      EXPECT_EQ(g.values("Authorization"),
                std::vector<std::string>{std::string("Bearer ") + kSecret});
      EXPECT_EQ(g.sni, "api.test");
    }
  }

  HttpResponse roundTrip(ProxyClient& c, const std::string& req) {
    EXPECT_TRUE(c.send(req));
    return c.readResponse();
  }

  std::optional<audit::RequestEvent> waitRequest(const std::string& method,
                                                 const std::string& path) {
    return sink_->waitRequest(
        [&](const audit::RequestEvent& e) { return e.method == method && e.path == path; });
  }

  std::optional<audit::ConnectionEvent> waitConnection(
      const std::function<bool(const audit::ConnectionEvent&)>& pred) {
    return sink_->waitConnection(pred);
  }

  const proxy::Placeholder* placeholder(const std::string& env) const {
    for (const auto& p : placeholders_) {
      if (p.env == env) return &p;
    }
    return nullptr;
  }

  TestPki pki_;
  fs::path dir_;
  fs::path ca_file_;
  std::unique_ptr<HttpsUpstream> up_;
  std::unique_ptr<HttpsUpstream> plain_;
  std::shared_ptr<proxy::CertificateAuthority> ca_;
  std::shared_ptr<const policy::Workflow> workflow_;
  std::shared_ptr<const policy::Matcher> matcher_;
  std::vector<proxy::Placeholder> placeholders_;
  std::shared_ptr<const policy::SecretStore> secrets_;
  std::shared_ptr<FakeSink> sink_;
  std::unique_ptr<proxy::Proxy> proxy_;
  std::uint16_t port_ = 0;
  std::string transcript_;  // every byte every client of this test received
};

// ---------------------------------------------------------------------------------------------
// Injection

TEST_F(InspectTest, AllowedRequestArrivesWithInjectedHeader) {
  auto c = tunnel("api.test", up_->port());
  ASSERT_TRUE(c);
  auto r = roundTrip(*c, request("GET", "/v1/data", apiAuthority()));
  EXPECT_EQ(r.status, 200) << r.body;

  auto got = up_->requests();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].target, "/v1/data");
  EXPECT_EQ(got[0].values("Authorization"),
            std::vector<std::string>{std::string("Bearer ") + kSecret});
  EXPECT_EQ(got[0].sni, "api.test") << "the proxy sends SNI = the CONNECT host upstream";
  EXPECT_TRUE(c->alpn().empty() || c->alpn() == "http/1.1") << c->alpn();
  // The client sees only the echo's digest of what arrived, never the value.
  auto echo = nlohmann::json::parse(r.body, nullptr, false);
  ASSERT_FALSE(echo.is_discarded()) << r.body;
  bool found = false;
  for (const auto& h : echo["headers"]) {
    if (h["name"] == "Authorization") {
      found = true;
      EXPECT_EQ(h["sha256"], sha256Hex(std::string("Bearer ") + kSecret));
    }
  }
  EXPECT_TRUE(found) << r.body;

  auto ev = waitRequest("GET", "/v1/data");
  ASSERT_TRUE(ev);
  EXPECT_EQ(ev->host, "api.test");
  EXPECT_EQ(ev->status, 200);
  EXPECT_EQ(ev->decision, audit::Decision::kAllow);
  EXPECT_EQ(ev->rule_id, "api");
  EXPECT_EQ(ev->execution_id, "exec-tls");
  EXPECT_EQ(ev->workflow, "tls-test");
  EXPECT_EQ(ev->injected_secrets, std::vector<std::string>{"api_token"});

  c.reset();  // closing the tunnel writes its connection row
  auto conn = waitConnection([](const audit::ConnectionEvent& e) { return e.host == "api.test"; });
  ASSERT_TRUE(conn);
  EXPECT_EQ(conn->kind, audit::ConnectionKind::kConnect);
  EXPECT_EQ(conn->decision, audit::Decision::kAllow);
  EXPECT_EQ(conn->rule_id, "api");
  EXPECT_EQ(conn->tls, audit::TlsHandling::kInspect);
  EXPECT_EQ(conn->resolved_ip, "127.0.0.1");
  EXPECT_EQ(conn->id, ev->connection_id);
}

TEST_F(InspectTest, ClientSuppliedAuthorizationIsReplaced) {
  auto c = tunnel("api.test", up_->port());
  ASSERT_TRUE(c);
  auto r = roundTrip(*c, request("POST", "/v1/items", apiAuthority(),
                                 "Authorization: Bearer forged-by-the-sandbox\r\n"
                                 "authorization: Basic Zm9yZ2VkOmZvcmdlZA==\r\n",
                                 "{\"x\":1}"));
  EXPECT_EQ(r.status, 200) << r.body;
  auto got = up_->requests();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].values("Authorization"),
            std::vector<std::string>{std::string("Bearer ") + kSecret})
      << "every client Authorization is dropped and exactly the injected one sent";
  EXPECT_EQ(got[0].body, "{\"x\":1}");
  auto ev = waitRequest("POST", "/v1/items");
  ASSERT_TRUE(ev);
  EXPECT_EQ(ev->status, 200);
  EXPECT_EQ(ev->decision, audit::Decision::kAllow);
  EXPECT_EQ(ev->injected_secrets, std::vector<std::string>{"api_token"});
}

// ---------------------------------------------------------------------------------------------
// Request-level policy inside the tunnel

void expectDenialBody(const HttpResponse& r, const std::string& reason, const std::string& rule) {
  EXPECT_EQ(r.header("x-sluice-reason"), reason);
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.body;
  EXPECT_EQ(j.value("error", ""), "denied") << r.body;
  EXPECT_EQ(j.value("workflow", ""), "tls-test") << r.body;
  EXPECT_EQ(j.value("rule", ""), rule) << r.body;
  EXPECT_EQ(j.value("reason", ""), reason) << r.body;
  EXPECT_FALSE(j.value("detail", "").empty()) << r.body;
}

TEST_F(InspectTest, DeniedMethodGets403WithReason) {
  auto c = tunnel("api.test", up_->port());
  ASSERT_TRUE(c);
  auto r = roundTrip(*c, request("DELETE", "/v1/data", apiAuthority()));
  EXPECT_EQ(r.status, 403);
  expectDenialBody(r, "method_not_allowed", "api");
  EXPECT_TRUE(up_->requests().empty()) << "a denied request never reaches the upstream";
  auto ev = waitRequest("DELETE", "/v1/data");
  ASSERT_TRUE(ev);
  EXPECT_EQ(ev->status, 403);
  EXPECT_EQ(ev->decision, audit::Decision::kDeny);
  EXPECT_EQ(ev->reason, "method_not_allowed");
  EXPECT_EQ(ev->rule_id, "api");
  EXPECT_TRUE(ev->injected_secrets.empty());
}

TEST_F(InspectTest, DeniedPathGets403WithReason) {
  auto c = tunnel("api.test", up_->port());
  ASSERT_TRUE(c);
  auto r = roundTrip(*c, request("GET", "/v2/data", apiAuthority()));
  EXPECT_EQ(r.status, 403);
  expectDenialBody(r, "path_not_allowed", "api");
  auto ev = waitRequest("GET", "/v2/data");
  ASSERT_TRUE(ev);
  EXPECT_EQ(ev->status, 403);
  EXPECT_EQ(ev->decision, audit::Decision::kDeny);
  EXPECT_EQ(ev->reason, "path_not_allowed");
  EXPECT_TRUE(ev->injected_secrets.empty());
  EXPECT_TRUE(up_->requests().empty());
}

TEST_F(InspectTest, DenyRuleOnPathBeatsTheAllow) {
  auto c = tunnel("api.test", up_->port());
  ASSERT_TRUE(c);
  auto r = roundTrip(*c, request("GET", "/v1/admin/users", apiAuthority()));
  EXPECT_EQ(r.status, 403);
  expectDenialBody(r, "denied_by_rule", "api-admin");
  auto ev = waitRequest("GET", "/v1/admin/users");
  ASSERT_TRUE(ev);
  EXPECT_EQ(ev->status, 403);
  EXPECT_EQ(ev->decision, audit::Decision::kDeny);
  EXPECT_EQ(ev->rule_id, "api-admin");
  EXPECT_EQ(ev->reason, "denied_by_rule");
  EXPECT_TRUE(up_->requests().empty());
}

// ---------------------------------------------------------------------------------------------
// Domain fronting: SNI and Host must name the CONNECT target

TEST_F(InspectTest, SniMismatchIsRefusedAndAudited) {
  ProxyClient c(port_, &transcript_);
  ASSERT_TRUE(c.ok());
  auto r = c.connect(apiAuthority());
  ASSERT_EQ(r.status, 200);
  std::string why;
  EXPECT_FALSE(c.handshake(ca_->certificate(), "other.test", "api.test", &why))
      << "a ClientHello naming another host than the CONNECT must not complete";
  EXPECT_TRUE(contains(why, "unrecognized name")) << why;  // the alert the proxy sends
  EXPECT_TRUE(c.waitClosed()) << "the proxy closes the connection after the alert";
  auto conn = waitConnection([](const audit::ConnectionEvent& e) { return e.host == "api.test"; });
  ASSERT_TRUE(conn);
  EXPECT_EQ(conn->reason, "host_mismatch");
  EXPECT_EQ(conn->decision, audit::Decision::kDeny);
  EXPECT_EQ(conn->tls, audit::TlsHandling::kInspect);
  EXPECT_TRUE(up_->requests().empty());
}

TEST_F(InspectTest, NoSniIsAccepted) {
  // Clients talking to an IP literal (and some old ones) send no SNI; only a different name
  // is fronting.
  auto c = tunnel("api.test", up_->port(), "");
  ASSERT_TRUE(c);
  auto r = roundTrip(*c, request("GET", "/v1/nosni", apiAuthority()));
  EXPECT_EQ(r.status, 200) << r.body;
  auto ev = waitRequest("GET", "/v1/nosni");
  ASSERT_TRUE(ev);
  EXPECT_EQ(ev->decision, audit::Decision::kAllow);
}

TEST_F(InspectTest, HostMismatchGets400) {
  auto c = tunnel("api.test", up_->port());
  ASSERT_TRUE(c);
  auto r = roundTrip(*c, request("GET", "/v1/fronted", otherAuthority()));
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.header("x-sluice-reason"), "host_mismatch");
  EXPECT_TRUE(up_->requests().empty()) << "the fronted request must not reach the upstream";
  auto ev = waitRequest("GET", "/v1/fronted");
  ASSERT_TRUE(ev);
  EXPECT_EQ(ev->status, 400);
  EXPECT_EQ(ev->decision, audit::Decision::kDeny);
  EXPECT_EQ(ev->reason, "host_mismatch");
  EXPECT_TRUE(ev->injected_secrets.empty());
}

TEST_F(InspectTest, HostWithPortIsAccepted) {
  // Clients put the port in Host when it is not 443 (RFC 9110 7.2), as here.
  auto c = tunnel("api.test", up_->port());
  ASSERT_TRUE(c);
  auto r = roundTrip(*c, request("GET", "/v1/withport", apiAuthority()));
  EXPECT_EQ(r.status, 200) << r.body;
  auto ev = waitRequest("GET", "/v1/withport");
  ASSERT_TRUE(ev);
  EXPECT_EQ(ev->decision, audit::Decision::kAllow);
}

// ---------------------------------------------------------------------------------------------
// IP-literal CONNECTs: the leaf carries an IP SAN, no SNI goes upstream, the upstream's
// certificate is checked against the address

TEST_F(InspectTest, IpLiteralIsInspectedAndVerifiedByAddress) {
  HttpsUpstream ip_up(pki_.leaf({"IP:127.0.0.1"}));
  auto c = tunnel("127.0.0.1", ip_up.port(), "");
  ASSERT_TRUE(c);
  const std::string authority = "127.0.0.1:" + std::to_string(ip_up.port());
  auto r = roundTrip(*c, request("GET", "/by-address", authority));
  EXPECT_EQ(r.status, 200) << r.body;
  auto got = ip_up.requests();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].sni, "") << "no SNI for an IP literal (RFC 6066 3)";
  auto ev = waitRequest("GET", "/by-address");
  ASSERT_TRUE(ev);
  EXPECT_EQ(ev->host, "127.0.0.1");
  EXPECT_EQ(ev->rule_id, "loopback-ip");
  EXPECT_EQ(ev->decision, audit::Decision::kAllow);
  EXPECT_TRUE(ev->injected_secrets.empty());
}

TEST_F(InspectTest, IpLiteralWithANamedSniIsFronting) {
  HttpsUpstream ip_up(pki_.leaf({"IP:127.0.0.1"}));
  ProxyClient c(port_, &transcript_);
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c.connect("127.0.0.1:" + std::to_string(ip_up.port())).status, 200);
  EXPECT_FALSE(c.handshake(ca_->certificate(), "api.test", "127.0.0.1"));
  auto conn = waitConnection([&](const audit::ConnectionEvent& e) {
    return e.host == "127.0.0.1" && e.port == ip_up.port();
  });
  ASSERT_TRUE(conn);
  EXPECT_EQ(conn->decision, audit::Decision::kDeny);
  EXPECT_EQ(conn->reason, "host_mismatch");
  EXPECT_TRUE(ip_up.requests().empty());
}

TEST_F(InspectTest, IpLiteralUpstreamCertWithoutTheAddressGets502) {
  // up_'s certificate names api.test and other.test only.
  auto c = tunnel("127.0.0.1", up_->port(), "");
  ASSERT_TRUE(c);
  auto r = roundTrip(*c, request("GET", "/x", "127.0.0.1:" + std::to_string(up_->port())));
  EXPECT_EQ(r.status, 502) << r.body;
  EXPECT_EQ(r.header("x-sluice-reason"), "upstream_tls");
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.body;
  const std::string why = X509_verify_cert_error_string(X509_V_ERR_IP_ADDRESS_MISMATCH);
  EXPECT_TRUE(contains(j.value("detail", ""), why)) << j.value("detail", "");
  c.reset();
  auto conn =
      waitConnection([&](const audit::ConnectionEvent& e) { return e.host == "127.0.0.1"; });
  ASSERT_TRUE(conn);
  EXPECT_EQ(conn->decision, audit::Decision::kFail);  // the network's failure, not a denial
  EXPECT_EQ(conn->reason, "tls_failed");
  EXPECT_TRUE(up_->requests().empty());
}

// ---------------------------------------------------------------------------------------------
// Bodies and pipelining inside the tunnel

TEST_F(InspectTest, LargeBodiesCrossTheTunnelIntact) {
  auto c = tunnel("api.test", up_->port());
  ASSERT_TRUE(c);
  std::string upload(3 << 20, 'u');
  for (std::size_t i = 0; i < upload.size(); i += 4099) upload[i] = static_cast<char>('a' + i % 26);
  auto r = roundTrip(*c, request("POST", "/v1/upload", apiAuthority(), "", upload));
  EXPECT_EQ(r.status, 200);
  auto down = roundTrip(*c, request("GET", "/v1/big/2097152", apiAuthority()));
  EXPECT_EQ(down.status, 200);
  EXPECT_EQ(down.body.size(), 2097152u);
  EXPECT_EQ(down.body.find_first_not_of('b'), std::string::npos);
  auto got = up_->requests();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].body.size(), upload.size());
  EXPECT_TRUE(got[0].body == upload) << "the upload arrived altered";
  auto ev = waitRequest("POST", "/v1/upload");
  ASSERT_TRUE(ev);
  EXPECT_EQ(ev->status, 200);
  EXPECT_EQ(ev->injected_secrets, std::vector<std::string>{"api_token"});
  EXPECT_TRUE(waitRequest("GET", "/v1/big/2097152"));
}

// The pipeline matrix over inspected TLS (tests/proxy/pipeline_test.cpp covers plain HTTP and
// plain HTTP inside CONNECT): each spelling, fresh tunnel or reused, decides as `policy explain`
// says for the canonical request, the upstream sees exactly that canonical target, and the
// injected credential goes only with allowed requests.
TEST_F(InspectTest, EverySpellingDecidesAsExplainSays) {
  const std::vector<std::string> paths = {
      "/v1/ok", "/v1/../admin/x", "/v1/%2e%2e/admin/x", "/v1/..%2fadmin/x", "/v1//admin/x",
      "/v1/./admin/x", "/v1/%61dmin/x", "/v1/..;/admin/x", "/v1/a%5cb", "/v1/%7Eu/./a", "/v2/x",
      "/v1/ok.txt;/../../admin/x",
      // Ambiguous spellings.
      "/v1/admin;x/users", "/v1/admin;/users", "/v1/data;x", "/v1/%C0%AE%C0%AE/admin/x", "/v1/%ff",
      "/v1/%0a", "/v1/admin./x", "/v1/admin%20/x", "/v1/.../admin/x"};
  for (bool reuse : {false, true}) {
    for (const char* method : {"GET", "POST", "DELETE", "get"}) {
      for (const auto& path : paths) {
        SCOPED_TRACE(std::string(reuse ? "reused " : "fresh ") + method + " " + path);
        policy::ExplainQuery q;
        q.url = "https://" + apiAuthority() + path;
        q.method = method;
        q.ip = "127.0.0.1";
        auto ex = policy::explain(*matcher_, q);
        ASSERT_TRUE(ex) << ex.error();
        auto c = tunnel("api.test", up_->port());
        ASSERT_TRUE(c);
        if (reuse) {
          auto warm = roundTrip(*c, request("GET", "/v1/warm", apiAuthority()));
          ASSERT_EQ(warm.status, 200);
        }
        const auto before = up_->requests().size();
        auto r = roundTrip(*c, request(method, path, apiAuthority()));
        auto got = up_->requests();
        if (ex->decision.allowed) {
          EXPECT_EQ(r.status, 200) << r.body;
          ASSERT_EQ(got.size(), before + 1);
          EXPECT_EQ(got.back().target, ex->path);
          EXPECT_EQ(got.back().method, method);
        } else {
          EXPECT_GE(r.status, 400) << r.body;
          EXPECT_LT(r.status, 500) << r.body;
          EXPECT_EQ(r.header("x-sluice-reason"), policy::reasonName(ex->decision.reason));
          EXPECT_EQ(got.size(), before) << "refused request reached the upstream";
        }
      }
    }
  }
}

// Ambiguous spellings inside an inspected tunnel, where the rule injects a credential: each
// ambiguous spelling is refused (or denied, when the deny rule covers it once its ';'
// parameters are cut off) and nothing, credential included, reaches the upstream.
TEST_F(InspectTest, AmbiguousSpellingsNeverCarryTheInjectedCredential) {
  struct Case {
    const char* path;
    int status;
    const char* reason;
  };
  const Case cases[] = {
      {"/v1/data;x/users", 400, "ambiguous_target"},
      {"/v1/admin;x/users", 403, "denied_by_rule"},  // routed as /v1/admin/users by Tomcat
      {"/v1/admin;/users", 403, "denied_by_rule"},
      {"/v1/%C0%AE%C0%AE/admin/users", 400, "ambiguous_target"},
      {"/v1/%ff", 400, "ambiguous_target"},
      {"/v1/%0a", 400, "ambiguous_target"},
      {"/v1/admin./users", 400, "ambiguous_target"},
      {"/v1/admin%20/users", 400, "ambiguous_target"},
      {"/v1/.../admin/users", 400, "ambiguous_target"},
  };
  for (bool reuse : {false, true}) {
    for (const auto& c : cases) {
      SCOPED_TRACE(std::string(reuse ? "reused " : "fresh ") + c.path);
      auto t = tunnel("api.test", up_->port());
      ASSERT_TRUE(t);
      if (reuse) {
        ASSERT_EQ(roundTrip(*t, request("GET", "/v1/warm", apiAuthority())).status, 200);
      }
      const auto before = up_->requests().size();
      auto r = roundTrip(*t, request("GET", c.path, apiAuthority()));
      EXPECT_EQ(r.status, c.status) << r.body;
      EXPECT_EQ(r.header("x-sluice-reason"), c.reason) << r.body;
      EXPECT_EQ(up_->requests().size(), before) << "a refused request reached the upstream";
    }
  }
}

TEST_F(InspectTest, PipelinedRequestsAreAnsweredInOrder) {
  auto c = tunnel("api.test", up_->port());
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->send(request("GET", "/v1/first", apiAuthority()) +
                      request("DELETE", "/v1/second", apiAuthority()) +
                      request("GET", "/v1/third", apiAuthority())));
  auto r1 = c->readResponse();
  auto r2 = c->readResponse();
  auto r3 = c->readResponse();
  EXPECT_EQ(r1.status, 200);
  EXPECT_TRUE(contains(r1.body, sha256Hex("/v1/first"))) << r1.body;
  EXPECT_EQ(r2.status, 403);
  EXPECT_EQ(r2.header("x-sluice-reason"), "method_not_allowed");
  EXPECT_EQ(r3.status, 200);
  EXPECT_TRUE(contains(r3.body, sha256Hex("/v1/third"))) << r3.body;
  auto got = up_->requests();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].target, "/v1/first");
  EXPECT_EQ(got[1].target, "/v1/third");
  auto second = waitRequest("DELETE", "/v1/second");
  ASSERT_TRUE(second);
  EXPECT_EQ(second->decision, audit::Decision::kDeny);
  EXPECT_TRUE(waitRequest("GET", "/v1/third"));
}

// ---------------------------------------------------------------------------------------------
// Upstream certificate verification

struct BadUpstreamCase {
  const char* name;
  int verify_error;  // the X509_V_ERR_* the proxy must report
};
void PrintTo(const BadUpstreamCase& c, std::ostream* os) { *os << c.name; }

class UpstreamVerifyTest : public InspectTest,
                           public ::testing::WithParamInterface<BadUpstreamCase> {};

TEST_P(UpstreamVerifyTest, BadCertificateGets502WithTheReason) {
  const std::string kind = GetParam().name;
  ServerCert cert;
  if (kind == "expired") {
    cert = pki_.leaf({"api.test"}, std::chrono::hours(-48), std::chrono::hours(-24));
  } else if (kind == "wrong_host") {
    cert = pki_.leaf({"elsewhere.test"});
  } else {
    cert = pki_.leaf({"api.test"}, std::chrono::hours(-1), std::chrono::hours(24), true);
  }
  HttpsUpstream bad(cert);
  // The CONNECT is answered 200 and the client's TLS completes against the proxy's leaf, so
  // the refusal reaches the client as an HTTP response its library shows (curl, requests).
  auto c = tunnel("api.test", bad.port());
  ASSERT_TRUE(c);
  const std::string authority = "api.test:" + std::to_string(bad.port());
  auto r = roundTrip(
      *c, request("GET", "/v1/through-bad", authority, "Authorization: Bearer client-own\r\n"));
  EXPECT_EQ(r.status, 502) << r.body;
  EXPECT_EQ(r.header("x-sluice-reason"), "upstream_tls");
  // "upstream certificate verification failed[ for HOST:PORT]: <OpenSSL's reason>"
  const std::string expected =
      std::string(": ") + X509_verify_cert_error_string(GetParam().verify_error);
  auto names_reason = [&](const std::string& detail) {
    return detail.rfind("upstream certificate verification failed", 0) == 0 &&
           detail.size() >= expected.size() &&
           detail.compare(detail.size() - expected.size(), expected.size(), expected) == 0;
  };
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.body;
  EXPECT_EQ(j.value("error", ""), "upstream_tls") << r.body;
  EXPECT_EQ(j.value("reason", ""), "upstream_tls") << r.body;
  EXPECT_EQ(j.value("workflow", ""), "tls-test") << r.body;
  EXPECT_EQ(j.value("rule", ""), "api") << r.body;
  EXPECT_TRUE(names_reason(j.value("detail", "")))
      << "detail: " << j.value("detail", "") << "\nexpected to end with: " << expected;
  EXPECT_TRUE(bad.requests().empty());

  auto ev = waitRequest("GET", "/v1/through-bad");
  ASSERT_TRUE(ev);
  EXPECT_EQ(ev->status, 502);
  EXPECT_EQ(ev->decision, audit::Decision::kFail);
  EXPECT_EQ(ev->reason, "tls_failed");
  EXPECT_TRUE(ev->injected_secrets.empty()) << "nothing was sent to an unverified upstream";

  c.reset();
  auto conn = waitConnection([&](const audit::ConnectionEvent& e) {
    return e.host == "api.test" && e.port == bad.port();
  });
  ASSERT_TRUE(conn);
  EXPECT_EQ(conn->decision, audit::Decision::kFail);  // the network's failure, not a denial
  EXPECT_EQ(conn->reason, "tls_failed");
  EXPECT_EQ(conn->rule_id, "api");
  EXPECT_TRUE(names_reason(conn->detail))
      << "detail: " << conn->detail << "\nexpected to end with: " << expected;
}

INSTANTIATE_TEST_SUITE_P(
    BadCertificates, UpstreamVerifyTest,
    ::testing::Values(BadUpstreamCase{"expired", X509_V_ERR_CERT_HAS_EXPIRED},
                      BadUpstreamCase{"wrong_host", X509_V_ERR_HOSTNAME_MISMATCH},
                      BadUpstreamCase{"unknown_ca", X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY}),
    [](const ::testing::TestParamInfo<BadUpstreamCase>& i) { return std::string(i.param.name); });

// ---------------------------------------------------------------------------------------------
// Placeholders

TEST_F(InspectTest, PlaceholderIsSwappedOnItsRule) {
  const auto* ph = placeholder("API_TOKEN");
  ASSERT_NE(ph, nullptr);
  EXPECT_EQ(ph->secret, "api_token");
  EXPECT_EQ(ph->rule_id, "api");
  EXPECT_GE(ph->token.size(), 32u);
  EXPECT_FALSE(contains(ph->token, kSecret));
  auto c = tunnel("api.test", up_->port());
  ASSERT_TRUE(c);
  auto r = roundTrip(*c, request("GET", "/v1/with-placeholder", apiAuthority(),
                                 "X-Api-Token: Token " + ph->token + "\r\n"));
  EXPECT_EQ(r.status, 200) << r.body;
  auto got = up_->requests();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].header("X-Api-Token"), std::string("Token ") + kSecret);
  auto ev = waitRequest("GET", "/v1/with-placeholder");
  ASSERT_TRUE(ev);
  EXPECT_EQ(ev->decision, audit::Decision::kAllow);
  EXPECT_NE(ev->reason, "placeholder_leak");
  EXPECT_EQ(ev->injected_secrets, std::vector<std::string>{"api_token"});
}

TEST_F(InspectTest, PlaceholderSwapKeepsSameNamedHeaders) {
  const auto* ph = placeholder("API_TOKEN");
  ASSERT_NE(ph, nullptr);
  auto c = tunnel("api.test", up_->port());
  ASSERT_TRUE(c);
  auto r = roundTrip(*c, request("GET", "/v1/multi", apiAuthority(),
                                 "X-Multi: plain\r\nX-Multi: Token " + ph->token + "\r\n"));
  EXPECT_EQ(r.status, 200) << r.body;
  auto got = up_->requests();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].values("X-Multi"),
            (std::vector<std::string>{"plain", std::string("Token ") + kSecret}));
}

TEST_F(InspectTest, SecretReflectedInAResponseHeaderIsRedacted) {
  auto c = tunnel("api.test", up_->port());
  ASSERT_TRUE(c);
  auto r = roundTrip(*c, request("GET", "/v1/reflect", apiAuthority()));
  EXPECT_EQ(r.status, 200) << r.body;
  auto got = up_->requests();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].header("Authorization"), std::string("Bearer ") + kSecret);
  EXPECT_EQ(r.header("x-reflected-authorization"), "Bearer [redacted by sluice]");
  EXPECT_FALSE(contains(transcript_, kSecret));
}

TEST_F(InspectTest, AbsoluteFormTargetNamingAnotherHostIsRefused) {
  auto c = tunnel("api.test", up_->port());
  ASSERT_TRUE(c);
  auto r =
      roundTrip(*c, request("GET", "https://" + otherAuthority() + "/v1/fronted", apiAuthority()));
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.header("x-sluice-reason"), "host_mismatch");
  EXPECT_TRUE(up_->requests().empty()) << "the fronted request must not reach the upstream";
}

TEST_F(InspectTest, PlaceholderSentToAnotherHostIsRefusedAndAudited) {
  const auto* ph = placeholder("API_TOKEN");
  ASSERT_NE(ph, nullptr);
  auto c = tunnel("other.test", up_->port());
  ASSERT_TRUE(c);
  auto r = roundTrip(
      *c, request("GET", "/exfil", otherAuthority(), "X-Api-Token: Token " + ph->token + "\r\n"));
  EXPECT_EQ(r.status, 403) << r.body;
  EXPECT_EQ(r.header("x-sluice-reason"), "placeholder_leak");
  EXPECT_TRUE(up_->requests().empty()) << "a request carrying a leaked token must not leave";
  auto ev = waitRequest("GET", "/exfil");
  ASSERT_TRUE(ev);
  EXPECT_EQ(ev->host, "other.test");
  EXPECT_EQ(ev->rule_id, "other");
  EXPECT_EQ(ev->status, 403);
  EXPECT_EQ(ev->decision, audit::Decision::kDeny);
  EXPECT_EQ(ev->reason, "placeholder_leak");
  EXPECT_TRUE(ev->injected_secrets.empty());
  // Nothing of that request was left unread: the tunnel carries the next one.
  EXPECT_EQ(roundTrip(*c, request("GET", "/after", otherAuthority())).status, 200);
}

// Placeholders anywhere in a request: path, query, bodies (Content-Length and chunked).

TEST_F(InspectTest, PlaceholderInPathAndQueryIsSwappedAndTheRowKeepsTheToken) {
  const auto* ph = placeholder("API_TOKEN");
  ASSERT_NE(ph, nullptr);
  auto c = tunnel("api.test", up_->port());
  ASSERT_TRUE(c);
  const std::string path = "/v1/keys/" + ph->token;
  auto r = roundTrip(*c, request("GET", path + "?key=" + ph->token + "&x=1", apiAuthority()));
  EXPECT_EQ(r.status, 200) << r.body;
  auto got = up_->requests();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].target, std::string("/v1/keys/") + kSecret + "?key=" + kSecret + "&x=1");
  auto ev = waitRequest("GET", path);
  ASSERT_TRUE(ev) << "the row records the placeholder form of the path";
  EXPECT_EQ(ev->decision, audit::Decision::kAllow);
  EXPECT_EQ(ev->injected_secrets, std::vector<std::string>{"api_token"});
}

TEST_F(InspectTest, PlaceholderInBodiesIsSwappedWithContentLengthRecomputed) {
  const auto* ph = placeholder("API_TOKEN");
  ASSERT_NE(ph, nullptr);
  auto c = tunnel("api.test", up_->port());
  ASSERT_TRUE(c);
  const std::string json = R"({"api_key":")" + ph->token + R"(","n":1})";
  const std::string form = "a=1&key=" + ph->token + "&again=" + ph->token;
  EXPECT_EQ(roundTrip(*c, request("POST", "/v1/json", apiAuthority(),
                                  "Content-Type: application/json\r\n", json))
                .status,
            200);
  EXPECT_EQ(roundTrip(*c, request("POST", "/v1/form", apiAuthority(),
                                  "Content-Type: application/x-www-form-urlencoded\r\n", form))
                .status,
            200);
  // Chunked, the token split across two chunks, with 100-continue.
  const std::string text = "token=" + ph->token + "\n";
  const std::string a = text.substr(0, 20), b = text.substr(20);
  std::ostringstream chunked;
  chunked << "POST /v1/chunked HTTP/1.1\r\nHost: " << apiAuthority()
          << "\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n"
          << std::hex << a.size() << "\r\n"
          << a << "\r\n"
          << b.size() << "\r\n"
          << b << "\r\n0\r\n\r\n";
  auto r = roundTrip(*c, chunked.str());
  if (r.status == 100) r = c->readResponse();
  EXPECT_EQ(r.status, 200) << r.body;
  auto got = up_->requests();
  ASSERT_EQ(got.size(), 3u);
  auto swapped = [&](std::string s) {
    for (auto pos = s.find(ph->token); pos != std::string::npos; pos = s.find(ph->token))
      s.replace(pos, ph->token.size(), kSecret);
    return s;
  };
  EXPECT_EQ(got[0].body, swapped(json));
  EXPECT_EQ(got[0].header("Content-Length"), std::to_string(swapped(json).size()));
  EXPECT_EQ(got[1].body, swapped(form));
  EXPECT_EQ(got[1].header("Content-Length"), std::to_string(swapped(form).size()));
  EXPECT_EQ(got[2].body, swapped(text));
  EXPECT_EQ(got[2].header("Content-Length"), std::to_string(swapped(text).size()));
  EXPECT_TRUE(got[2].values("Transfer-Encoding").empty());
  EXPECT_EQ(up_->accepted(), 1) << "one kept-alive tunnel and upstream connection";
  for (const char* path : {"/v1/json", "/v1/form", "/v1/chunked"}) {
    auto ev = waitRequest("POST", path);
    ASSERT_TRUE(ev) << path;
    EXPECT_EQ(ev->status, 200) << path;
    EXPECT_EQ(ev->injected_secrets, std::vector<std::string>{"api_token"}) << path;
  }
}

TEST_F(InspectTest, PipelinedBodiesAreEachReadWholeAndSwapped) {
  const auto* ph = placeholder("API_TOKEN");
  ASSERT_NE(ph, nullptr);
  auto c = tunnel("api.test", up_->port());
  ASSERT_TRUE(c);
  // Three requests in one write: the two bodies are read whole from the same buffer the next
  // request's header is in.
  ASSERT_TRUE(c->send(request("POST", "/v1/p1", apiAuthority(), "", "a=" + ph->token) +
                      request("POST", "/v1/p2", apiAuthority(), "", ph->token + "&b") +
                      request("GET", "/v1/p3", apiAuthority())));
  auto r1 = c->readResponse();
  auto r2 = c->readResponse();
  auto r3 = c->readResponse();
  EXPECT_EQ(r1.status, 200) << r1.body;
  EXPECT_EQ(r2.status, 200) << r2.body;
  EXPECT_EQ(r3.status, 200) << r3.body;
  auto got = up_->requests();
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].body, std::string("a=") + kSecret);
  EXPECT_EQ(got[1].body, std::string(kSecret) + "&b");
  EXPECT_EQ(got[2].target, "/v1/p3");
  EXPECT_EQ(up_->accepted(), 1);
}

TEST_F(InspectTest, PlaceholderInABodyOrQueryToAnotherHostIsRefused) {
  const auto* ph = placeholder("API_TOKEN");
  ASSERT_NE(ph, nullptr);
  auto c = tunnel("other.test", up_->port());
  ASSERT_TRUE(c);
  auto body = roundTrip(*c, request("POST", "/exfil-body", otherAuthority(), "",
                                    R"({"stolen":")" + ph->token + R"("})"));
  EXPECT_EQ(body.status, 403) << body.body;
  EXPECT_EQ(body.header("x-sluice-reason"), "placeholder_leak");
  auto query = roundTrip(*c, request("GET", "/exfil-query?k=" + ph->token, otherAuthority()));
  EXPECT_EQ(query.status, 403) << query.body;
  EXPECT_EQ(query.header("x-sluice-reason"), "placeholder_leak");
  // A body without a token to the same host goes on.
  EXPECT_EQ(roundTrip(*c, request("POST", "/fine", otherAuthority(), "", "nothing here")).status,
            200);
  auto got = up_->requests();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].target, "/fine");
  EXPECT_EQ(got[0].body, "nothing here");
  for (const char* path : {"/exfil-body", "/exfil-query"}) {
    auto ev = waitRequest(path == std::string("/exfil-body") ? "POST" : "GET", path);
    ASSERT_TRUE(ev) << path;
    EXPECT_EQ(ev->decision, audit::Decision::kDeny) << path;
    EXPECT_EQ(ev->reason, "placeholder_leak") << path;
    EXPECT_EQ(ev->status, 403) << path;
  }
}

TEST_F(InspectTest, BodyLargerThanTheWholeBodyBoundStreamsUnchanged) {
  const auto* ph = placeholder("API_TOKEN");
  ASSERT_NE(ph, nullptr);
  auto c = tunnel("api.test", up_->port());
  ASSERT_TRUE(c);
  // Over 1 MiB with a Content-Length: streamed as sent (not read whole, so not swapped).
  std::string upload((1 << 20) + 10, 'x');
  upload.replace(100, ph->token.size(), ph->token);
  EXPECT_EQ(roundTrip(*c, request("POST", "/v1/huge", apiAuthority(), "", upload)).status, 200);
  // Chunked over the bound to the placeholder's rule cannot be read whole: 413.
  std::ostringstream chunked;
  chunked << "POST /v1/huge-chunked HTTP/1.1\r\nHost: " << apiAuthority()
          << "\r\nTransfer-Encoding: chunked\r\n\r\n"
          << std::hex << upload.size() << "\r\n"
          << upload << "\r\n0\r\n\r\n";
  auto r = roundTrip(*c, chunked.str());
  EXPECT_EQ(r.status, 413) << r.body;
  EXPECT_EQ(r.header("x-sluice-reason"), "body_too_large");
  auto got = up_->requests();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(got[0].body == upload);
}

// A body too large to read whole still cannot carry another rule's token out: it is searched
// as it streams, and the request is cut off (403 to the client, the upstream never gets the
// whole body) before the token's bytes leave. Content-Length and chunked alike.
TEST_F(InspectTest, AStreamingBodyWithAnotherRulesTokenIsCutOff) {
  const auto* ph = placeholder("API_TOKEN");
  ASSERT_NE(ph, nullptr);
  std::string upload((1 << 20) + (1 << 19), 'x');
  upload.replace(upload.size() - 4096, ph->token.size(), ph->token);  // past the first MiB
  {
    auto c = tunnel("other.test", up_->port());
    ASSERT_TRUE(c);
    auto r = roundTrip(*c, request("POST", "/exfil-huge", otherAuthority(), "", upload));
    EXPECT_EQ(r.status, 403) << r.body;
    EXPECT_EQ(r.header("x-sluice-reason"), "placeholder_leak");
  }
  {
    auto c = tunnel("other.test", up_->port());
    ASSERT_TRUE(c);
    std::ostringstream chunked;
    chunked << "POST /exfil-huge-chunked HTTP/1.1\r\nHost: " << otherAuthority()
            << "\r\nTransfer-Encoding: chunked\r\n\r\n"
            << std::hex << upload.size() << "\r\n"
            << upload << "\r\n0\r\n\r\n";
    auto r = roundTrip(*c, chunked.str());
    EXPECT_EQ(r.status, 403) << r.body;
    EXPECT_EQ(r.header("x-sluice-reason"), "placeholder_leak");
  }
  for (const auto& got : up_->requests()) ADD_FAILURE() << "forwarded whole: " << got.target;
  auto ev = waitRequest("POST", "/exfil-huge");
  ASSERT_TRUE(ev);
  EXPECT_EQ(ev->decision, audit::Decision::kDeny);
  EXPECT_EQ(ev->reason, "placeholder_leak");
  // The same large body without a token goes through whole.
  auto c = tunnel("other.test", up_->port());
  ASSERT_TRUE(c);
  std::string clean((1 << 20) + 10, 'y');
  EXPECT_EQ(roundTrip(*c, request("POST", "/clean-huge", otherAuthority(), "", clean)).status, 200);
  auto got = up_->requests();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(got[0].body == clean);
}

// ---------------------------------------------------------------------------------------------
// Plain HTTP

TEST_F(InspectTest, PlaintextInjectionIsRefused) {
  ProxyClient c(port_, &transcript_);
  ASSERT_TRUE(c.ok());
  std::string authority = "plain.test:" + std::to_string(plain_->port());
  auto r = roundTrip(c, request("GET", "http://" + authority + "/key", authority));
  EXPECT_EQ(r.status, 403) << r.body;
  EXPECT_EQ(r.header("x-sluice-reason"), "plaintext_credentials");
  EXPECT_TRUE(plain_->requests().empty());
  auto ev = waitRequest("GET", "/key");
  ASSERT_TRUE(ev);
  EXPECT_EQ(ev->status, 403);
  EXPECT_EQ(ev->decision, audit::Decision::kDeny);
  EXPECT_EQ(ev->reason, "plaintext_credentials");
  EXPECT_EQ(ev->rule_id, "plain");
  EXPECT_TRUE(ev->injected_secrets.empty());
}

TEST_F(InspectTest, PlaintextInjectionAllowedWhenTheRuleSaysSo) {
  ProxyClient c(port_, &transcript_);
  ASSERT_TRUE(c.ok());
  std::string authority = "plainok.test:" + std::to_string(plain_->port());
  auto r = roundTrip(
      c, request("GET", "http://" + authority + "/key", authority, "X-Api-Key: client-value\r\n"));
  EXPECT_EQ(r.status, 200) << r.body;
  auto got = plain_->requests();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].values("X-Api-Key"), std::vector<std::string>{kPlainSecret});
  auto ev = waitRequest("GET", "/key");
  ASSERT_TRUE(ev);
  EXPECT_EQ(ev->status, 200);
  EXPECT_EQ(ev->decision, audit::Decision::kAllow);
  EXPECT_EQ(ev->rule_id, "plain-ok");
  EXPECT_EQ(ev->injected_secrets, std::vector<std::string>{"plain_key"});
}

// ---------------------------------------------------------------------------------------------
// Keep-alive, WebSockets, and the no-leak sweep

TEST_F(InspectTest, KeepAliveRequestsAreEachDecidedAndAudited) {
  auto c = tunnel("api.test", up_->port());
  ASSERT_TRUE(c);
  EXPECT_EQ(roundTrip(*c, request("GET", "/v1/a", apiAuthority())).status, 200);
  // A policy refusal (of a request without a body) answers that request only; the tunnel
  // carries on.
  EXPECT_EQ(roundTrip(*c, request("DELETE", "/v1/d", apiAuthority())).status, 403);
  EXPECT_EQ(roundTrip(*c, request("POST", "/v1/b", apiAuthority(), "", "hello")).status, 200);
  EXPECT_EQ(roundTrip(*c, request("GET", "/v1/c", apiAuthority())).status, 200);
  auto got = up_->requests();
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].target, "/v1/a");
  EXPECT_EQ(got[1].target, "/v1/b");
  EXPECT_EQ(got[1].body, "hello");
  EXPECT_EQ(got[2].target, "/v1/c");
  for (const auto& g : got) {
    EXPECT_EQ(g.values("Authorization"),
              std::vector<std::string>{std::string("Bearer ") + kSecret});
  }
  EXPECT_EQ(up_->accepted(), 1) << "one upstream TLS connection serves the whole tunnel";
  auto a = waitRequest("GET", "/v1/a");
  auto b = waitRequest("POST", "/v1/b");
  auto cc = waitRequest("GET", "/v1/c");
  auto d = waitRequest("DELETE", "/v1/d");
  ASSERT_TRUE(a && b && cc && d);
  EXPECT_EQ(a->connection_id, b->connection_id);
  EXPECT_EQ(a->connection_id, cc->connection_id);
  EXPECT_EQ(a->connection_id, d->connection_id);
  EXPECT_EQ(d->decision, audit::Decision::kDeny);
  EXPECT_EQ(d->reason, "method_not_allowed");
  EXPECT_EQ(sink_->requests().size(), 4u);
}

// A new tunnel to an authority the proxy has verified before resumes the upstream's TLS
// session (no certificate to send and verify again); each request is still decided, injected
// and audited, and a tunnel to another authority gets no session from this one.
// Sessions resume on a new connection: the second tunnel here must dial one, so nothing is
// parked (InspectReuseTest covers the connections kept between tunnels).
class InspectNoParkingTest : public InspectTest {
 protected:
  std::chrono::milliseconds parkedIdle() const override { return std::chrono::milliseconds(0); }
};

TEST_F(InspectNoParkingTest, UpstreamSessionsResumePerAuthority) {
  for (const char* path : {"/v1/first", "/v1/second"}) {
    auto c = tunnel("api.test", up_->port());
    ASSERT_TRUE(c);
    EXPECT_EQ(roundTrip(*c, request("GET", path, apiAuthority())).status, 200);
  }
  EXPECT_EQ(up_->handshakes(), 2);
  EXPECT_EQ(up_->resumed(), 1) << "the second tunnel resumes the first one's session";
  auto got = up_->requests();
  ASSERT_EQ(got.size(), 2u);
  expectInjectedOverApiSni(got);
  ASSERT_TRUE(waitRequest("GET", "/v1/second"));

  // The same name on another port, with a certificate from a CA nobody trusts: no session is
  // offered there, so its certificate is checked, and refused.
  HttpsUpstream rogue(
      pki_.leaf({"api.test"}, std::chrono::hours(-1), std::chrono::hours(24), /*rogue=*/true));
  auto c = tunnel("api.test", rogue.port());
  ASSERT_TRUE(c);
  auto r = roundTrip(*c, request("GET", "/v1/x", "api.test:" + std::to_string(rogue.port())));
  EXPECT_EQ(r.status, 502) << r.body;
  EXPECT_EQ(r.header("x-sluice-reason"), "upstream_tls");
  EXPECT_EQ(rogue.resumed(), 0);
  EXPECT_TRUE(rogue.requests().empty());
}

// ---------------------------------------------------------------------------------------------
// Upstream connections across tunnels (parked_upstreams.hpp). An inspected tunnel that ends
// with its upstream connection idle parks it, and the next tunnel of the same account to the
// same target, once its own admission has vetted the address, carries its requests on it.
// Only the transport is shared: every request is still decided, injected and recorded. Each
// test runs with one I/O thread (`sluice run`'s proxy) and with two (every connection on a
// strand of its own: the taker drives the connection from its strand).

class InspectReuseTest : public InspectTest, public ::testing::WithParamInterface<unsigned> {
 protected:
  unsigned threads() const override { return GetParam(); }

  // Waits (bounded) until the sink holds `n` connections rows: a tunnel's row is written
  // once it has ended, after it parked its upstream connection (or did not).
  bool waitConnectionRows(std::size_t n) {
    for (int i = 0; i < 1000 && sink_->connections().size() < n; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return sink_->connections().size() >= n;
  }

  // One GET in a tunnel of its own, through the proxy on `port` (the fixture's by default),
  // closed at once; returns when its connections row is written.
  HttpResponse oneRequestTunnel(const std::string& path, std::uint16_t port = 0) {
    const auto rows = sink_->connections().size();
    HttpResponse r;
    if (auto c = tunnel("api.test", up_->port(), "<host>", port))
      r = roundTrip(*c, request("GET", path, apiAuthority()));
    EXPECT_TRUE(waitConnectionRows(rows + 1));
    return r;
  }
};

INSTANTIATE_TEST_SUITE_P(Threads, InspectReuseTest, ::testing::Values(1u, 2u));

TEST_P(InspectReuseTest, TheNextTunnelCarriesItsRequestsOnTheParkedUpstreamConnection) {
  EXPECT_EQ(oneRequestTunnel("/v1/first").status, 200);
  {
    auto c = tunnel("api.test", up_->port());
    ASSERT_TRUE(c);
    EXPECT_EQ(roundTrip(*c, request("GET", "/v1/second", apiAuthority())).status, 200);
    // Decided on the reused connection as on a fresh one: the deny rule refuses, nothing leaves.
    auto denied = roundTrip(*c, request("GET", "/v1/admin/users", apiAuthority()));
    EXPECT_EQ(denied.status, 403);
    expectDenialBody(denied, "denied_by_rule", "api-admin");
    EXPECT_EQ(roundTrip(*c, request("GET", "/v1/third", apiAuthority())).status, 200);
  }
  EXPECT_EQ(up_->accepted(), 1) << "one TCP connection upstream for both tunnels";
  EXPECT_EQ(up_->handshakes(), 1) << "and one TLS handshake";
  auto got = up_->requests();
  ASSERT_EQ(got.size(), 3u);
  expectInjectedOverApiSni(got);
  ASSERT_TRUE(waitConnectionRows(2));
  auto rows = sink_->connections();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_NE(rows[0].id, rows[1].id);
  for (const auto& row : rows) {
    EXPECT_EQ(row.decision, audit::Decision::kAllow);
    EXPECT_EQ(row.resolved_ip, "127.0.0.1");
    EXPECT_EQ(row.tls, audit::TlsHandling::kInspect);
  }
  EXPECT_EQ(rows[0].detail, "");
  EXPECT_EQ(rows[1].detail, "upstream connection kept from tunnel " + rows[0].id);
  // Each request row names the tunnel it came through.
  auto second = waitRequest("GET", "/v1/second");
  ASSERT_TRUE(second);
  EXPECT_EQ(second->connection_id, rows[1].id);
  auto admin = waitRequest("GET", "/v1/admin/users");
  ASSERT_TRUE(admin);
  EXPECT_EQ(admin->decision, audit::Decision::kDeny);
  EXPECT_EQ(admin->rule_id, "api-admin");
}

// A parked connection belongs to the account that parked it: another execution's listener on
// the same proxy opens its own, and so does a tunnel to another target.
TEST_P(InspectReuseTest, AParkedConnectionServesOnlyItsOwnAccountAndTarget) {
  proxy::ListenerIdentity id;
  id.execution_id = "exec-other";
  id.matcher = matcher_;
  id.secrets = secrets_;
  id.placeholders = placeholders_;
  auto other = proxy_->listen("127.0.0.1", 0, std::move(id));
  ASSERT_TRUE(other) << other.error().message;

  EXPECT_EQ(oneRequestTunnel("/v1/mine").status, 200);
  EXPECT_EQ(oneRequestTunnel("/v1/theirs", *other).status, 200);
  EXPECT_EQ(up_->accepted(), 2) << "the other execution dialled its own connection";
  {
    auto c = tunnel("other.test", up_->port());
    ASSERT_TRUE(c);
    EXPECT_EQ(roundTrip(*c, request("GET", "/v1/elsewhere", otherAuthority())).status, 200);
  }
  EXPECT_EQ(up_->accepted(), 3) << "another target, another connection";
  EXPECT_EQ(oneRequestTunnel("/v1/mine-again").status, 200);
  EXPECT_EQ(up_->accepted(), 3) << "the first execution's own parked connection";
  auto got = up_->requests();
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[3].sni, "api.test");
}

// A parked connection the upstream closed meanwhile (its idle timeout) is not used: the next
// tunnel dials a fresh one and its request succeeds.
TEST_P(InspectReuseTest, AParkedConnectionTheUpstreamClosedIsNotUsed) {
  EXPECT_EQ(oneRequestTunnel("/v1/close-later").status, 200);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the upstream closes it
  auto r = oneRequestTunnel("/v1/after");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(up_->accepted(), 2);
  EXPECT_EQ(up_->requests().size(), 2u);
}

// The upstream closes the parked connection after the next tunnel took it, before that
// tunnel's first request went out: the request (no body) is sent once more on a new, verified
// connection to the same vetted address, and succeeds.
TEST_P(InspectReuseTest, AParkedConnectionClosedJustBeforeTheFirstRequestIsReplaced) {
  EXPECT_EQ(oneRequestTunnel("/v1/close-later").status, 200);  // closed 100 ms later
  auto c = tunnel("api.test", up_->port());
  ASSERT_TRUE(c);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the upstream closes it now
  auto r = roundTrip(*c, request("GET", "/v1/after", apiAuthority()));
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(roundTrip(*c, request("GET", "/v1/again", apiAuthority())).status, 200);
  c.reset();
  EXPECT_EQ(up_->accepted(), 2);
  EXPECT_EQ(up_->requests().size(), 3u);
  ASSERT_TRUE(waitConnectionRows(2));
  auto rows = sink_->connections();
  EXPECT_EQ(rows[1].decision, audit::Decision::kAllow);
  EXPECT_EQ(rows[1].detail, "upstream connection kept from tunnel " + rows[0].id +
                                " was closed before the first request; a new one was dialled");
}

// A live update that no longer vets the parked connection's address (the rule's cidrs leave
// 127.0.0.0/8) refuses the next CONNECT at its own admission: the parked connection is not used
// and nothing reaches the upstream.
TEST_P(InspectReuseTest, APolicyUpdateThatNoLongerVetsTheAddressRefusesBeforeAnyReuse) {
  EXPECT_EQ(oneRequestTunnel("/v1/first").status, 200);
  std::string yaml = policyYaml();
  const std::string lo = R"(cidrs: ["127.0.0.0/8"])";
  yaml.replace(yaml.find(lo), lo.size(), R"(cidrs: ["10.0.0.0/8"])");  // the api rule's
  auto w = policy::parseWorkflow(yaml, "tls-test.yaml");
  ASSERT_TRUE(w) << w.error().str();
  auto g = proxy_->replacePolicy(
      "exec-tls", policy::Matcher::compile(std::make_shared<const policy::Workflow>(*w)));
  ASSERT_TRUE(g) << g.error().message;
  ProxyClient c(port_, &transcript_);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(c.connect(apiAuthority()).status, 200);
  EXPECT_EQ(up_->accepted(), 1);
  EXPECT_EQ(up_->requests().size(), 1u);
}

// A tunnel whose decision inspects but whose client then speaks plain HTTP cannot use the TLS
// connection it took: that goes back to the pool, the tunnel dials its own, and the next TLS
// tunnel still finds the parked one.
TEST_P(InspectReuseTest, ATunnelThatCarriesPlainHttpPutsTheParkedConnectionBack) {
  EXPECT_EQ(oneRequestTunnel("/v1/first").status, 200);
  const auto rows = sink_->connections().size();
  {
    ProxyClient c(port_, &transcript_);
    ASSERT_TRUE(c.ok());
    ASSERT_EQ(c.connect(apiAuthority()).status, 200);
    ASSERT_TRUE(c.send(request("GET", "/v1/plain", apiAuthority())));
    EXPECT_NE(c.readResponse().status, 200);
  }
  ASSERT_TRUE(waitConnectionRows(rows + 1));
  EXPECT_EQ(up_->accepted(), 2) << "the plain tunnel dialled a connection of its own";
  EXPECT_EQ(oneRequestTunnel("/v1/after").status, 200);
  EXPECT_EQ(up_->accepted(), 2) << "the TLS tunnel took the parked one";
  auto got = up_->requests();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1].target, "/v1/after");
}

// An upstream that sent bytes nobody asked for after its response never answers the next
// tunnel's request with them: that connection is closed, not reused.
TEST_P(InspectReuseTest, AConnectionWithStrayBytesIsNeverReused) {
  EXPECT_EQ(oneRequestTunnel("/v1/stray").status, 200);
  // The stray bytes arrive (what has not arrived yet cannot be told from the next response,
  // on any connection; the upstream's second small write may wait for a delayed ACK).
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto r = oneRequestTunnel("/v1/after");
  EXPECT_EQ(r.status, 200);
  EXPECT_FALSE(contains(r.body, "stray")) << r.body;
  EXPECT_EQ(up_->accepted(), 2);
  auto got = up_->requests();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1].target, "/v1/after");
}

class InspectReuseShortIdleTest : public InspectReuseTest {
 protected:
  std::chrono::milliseconds parkedIdle() const override { return std::chrono::milliseconds(150); }
};
INSTANTIATE_TEST_SUITE_P(Threads, InspectReuseShortIdleTest, ::testing::Values(1u, 2u));

// Past the idle limit a parked connection is closed (the upstream sees it end) and the next
// tunnel dials its own.
TEST_P(InspectReuseShortIdleTest, AParkedConnectionIsClosedAfterTheIdleLimit) {
  EXPECT_EQ(oneRequestTunnel("/v1/first").status, 200);
  for (int i = 0; i < 400 && up_->ended() < 1; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(up_->ended(), 1) << "closed by the proxy once idle for 150 ms";
  EXPECT_EQ(oneRequestTunnel("/v1/second").status, 200);
  EXPECT_EQ(up_->accepted(), 2);
}

// Within one tunnel too: the stray response waiting in the upstream connection's TLS buffers
// never answers the tunnel's next request; the connection is closed instead and the request
// refused (the tunnel's one upstream connection has ended).
TEST_F(InspectTest, StrayBytesInTheTlsBuffersNeverAnswerTheNextRequest) {
  auto c = tunnel("api.test", up_->port());
  ASSERT_TRUE(c);
  EXPECT_EQ(roundTrip(*c, request("GET", "/v1/stray", apiAuthority())).status, 200);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the stray bytes arrive
  auto r = roundTrip(*c, request("GET", "/v1/after", apiAuthority()));
  EXPECT_FALSE(contains(r.body, "stray")) << r.body;
  EXPECT_EQ(r.status, 502) << r.body;
  EXPECT_EQ(up_->requests().size(), 1u);
}

// A parked connection stays open only while parked: the proxy's stop() closes it; nothing is
// left open upstream.
TEST_P(InspectReuseTest, StopClosesParkedConnections) {
  EXPECT_EQ(oneRequestTunnel("/v1/first").status, 200);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(up_->ended(), 0) << "parked, still open";
  proxy_->stop();
  for (int i = 0; i < 400 && up_->ended() < 1; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(up_->ended(), 1) << "closed by stop()";
  EXPECT_EQ(up_->accepted(), 1);
}

// Both TLS sides settle on AES-128-GCM (SHA-256 key schedule) although the client, like
// OpenSSL's default, offers AES-256-GCM-SHA384 first: the proxy's order picks the suite.
TEST_F(InspectTest, BothSidesNegotiateAes128Gcm) {
  auto c = tunnel("api.test", up_->port());
  ASSERT_TRUE(c);
  EXPECT_EQ(roundTrip(*c, request("GET", "/v1/a", apiAuthority())).status, 200);
  EXPECT_EQ(c->cipher(), "TLS_AES_128_GCM_SHA256");
  EXPECT_EQ(up_->lastCipher(), "TLS_AES_128_GCM_SHA256");
}

// A client handshake gets one resumption ticket (OpenSSL's default is two): enough for a
// client that reconnects one connection after another, and half the ticket work per handshake.
TEST_F(InspectTest, ClientGetsOneSessionTicket) {
  auto c = tunnel("api.test", up_->port());
  ASSERT_TRUE(c);
  EXPECT_EQ(roundTrip(*c, request("GET", "/v1/a", apiAuthority())).status, 200);
  EXPECT_EQ(c->sessionsReceived(), 1);
}

TEST_F(InspectTest, WebSocketUpgradeIsRelayed) {
  auto c = tunnel("api.test", up_->port());
  ASSERT_TRUE(c);
  auto r = roundTrip(*c, request("GET", "/ws", apiAuthority(),
                                 "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                                 "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                                 "Sec-WebSocket-Version: 13\r\n"));
  ASSERT_EQ(r.status, 101);
  EXPECT_EQ(r.header("sec-websocket-accept"), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
  // One masked text frame "hello" (RFC 6455 5.2: client frames are masked).
  const unsigned char mask[4] = {0x11, 0x22, 0x33, 0x44};
  std::string payload = "hello";
  std::string frame = {static_cast<char>(0x81), static_cast<char>(0x80 | payload.size())};
  for (unsigned char m : mask) frame += static_cast<char>(m);
  for (std::size_t i = 0; i < payload.size(); ++i)
    frame += static_cast<char>(payload[i] ^ mask[i % 4]);
  ASSERT_TRUE(c->send(frame));
  std::string reply = c->readN(2 + 10);
  ASSERT_EQ(reply.size(), 12u);
  EXPECT_EQ(static_cast<unsigned char>(reply[0]), 0x81);
  EXPECT_EQ(reply[1], 10);
  EXPECT_EQ(reply.substr(2), "echo:hello");
  auto got = up_->requests();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].values("Authorization"),
            std::vector<std::string>{std::string("Bearer ") + kSecret});
  auto ev = waitRequest("GET", "/ws");
  ASSERT_TRUE(ev);
  EXPECT_EQ(ev->status, 101);
  EXPECT_EQ(ev->decision, audit::Decision::kAllow);
}

TEST_F(InspectTest, SecretNeverReachesClientAuditOrLog) {
  const auto* ph = placeholder("API_TOKEN");
  ASSERT_NE(ph, nullptr);
  {
    auto c = tunnel("api.test", up_->port());
    ASSERT_TRUE(c);
    EXPECT_EQ(roundTrip(*c, request("GET", "/v1/x", apiAuthority(),
                                    "Authorization: Bearer forged\r\nX-T: " + ph->token + "\r\n"))
                  .status,
              200);
    EXPECT_EQ(
        roundTrip(*c, request("DELETE", "/v1/x", apiAuthority(), "X-T: " + ph->token + "\r\n"))
            .status,
        403);
    EXPECT_EQ(roundTrip(*c, request("GET", "/v1/admin/x", apiAuthority())).status, 403);
    EXPECT_EQ(roundTrip(*c, request("GET", "/v1/y", otherAuthority())).status, 400);
  }
  {
    auto c = tunnel("other.test", up_->port());
    ASSERT_TRUE(c);
    EXPECT_EQ(
        roundTrip(*c, request("GET", "/z", otherAuthority(), "X-T: " + ph->token + "\r\n")).status,
        403);
  }
  for (const char* host : {"plain.test", "plainok.test"}) {
    ProxyClient c(port_, &transcript_);
    std::string authority = std::string(host) + ":" + std::to_string(plain_->port());
    roundTrip(c, request("GET", "http://" + authority + "/p", authority));
  }
  {
    HttpsUpstream bad(
        pki_.leaf({"api.test"}, std::chrono::hours(-1), std::chrono::hours(24), true));
    auto c = tunnel("api.test", bad.port());
    ASSERT_TRUE(c);
    EXPECT_EQ(roundTrip(*c, request("GET", "/v1/bad", "api.test:" + std::to_string(bad.port()),
                                    "X-T: " + ph->token + "\r\n"))
                  .status,
              502);
  }
  // Sanity: the secrets did travel upstream (so the sweep below is not vacuous).
  bool upstream_saw = false;
  for (const auto& g : up_->requests()) {
    if (g.header("Authorization") == std::string("Bearer ") + kSecret) upstream_saw = true;
  }
  EXPECT_TRUE(upstream_saw);
  EXPECT_FALSE(transcript_.empty());
  proxy_->stop();  // every connection row written
  EXPECT_GE(sink_->requests().size(), 6u);
  EXPECT_FALSE(logSink()->last_formatted().empty()) << "the log capture must see the proxy's lines";
  EXPECT_FALSE(sink_->connections().empty());
  // TearDown sweeps events, transcript and log for both secret values.
}

TEST_F(InspectTest, LeafIsMintedOnceAndReused) {
  for (int i = 0; i < 3; ++i) {
    auto c = tunnel("api.test", up_->port());
    ASSERT_TRUE(c);
    EXPECT_EQ(roundTrip(*c, request("GET", "/v1/leaf", apiAuthority())).status, 200);
  }
  auto stats = ca_->cacheStats();
  EXPECT_EQ(stats.misses, 1u);
  EXPECT_GE(stats.hits, 2u);
}

// Without a CA the proxy cannot inspect, so it must not fall back to a blind tunnel that
// would bypass the method/path rules.
class NoCaTest : public InspectTest {
 protected:
  bool withCa() override { return false; }
};

TEST_F(NoCaTest, InspectConnectIsRefused) {
  ProxyClient c(port_, &transcript_);
  ASSERT_TRUE(c.ok());
  auto r = c.connect(apiAuthority());
  EXPECT_EQ(r.status, 403) << r.body;
  EXPECT_EQ(r.header("x-sluice-reason"), "inspection_required");
  EXPECT_TRUE(up_->requests().empty());
  EXPECT_EQ(up_->handshakes(), 0);
  auto conn = waitConnection([](const audit::ConnectionEvent& e) { return e.host == "api.test"; });
  ASSERT_TRUE(conn);
  EXPECT_EQ(conn->decision, audit::Decision::kDeny);
  EXPECT_EQ(conn->reason, "inspection_required");
}

// A listener without a secret store cannot inject: such requests are refused, never sent
// upstream without their credential (or with the client's own).
class NoSecretsTest : public InspectTest {
 protected:
  bool withSecrets() override { return false; }
};

TEST_F(NoSecretsTest, RequestNeedingInjectionIsRefused) {
  auto c = tunnel("api.test", up_->port());
  ASSERT_TRUE(c);
  auto r = roundTrip(*c, request("GET", "/v1/needs-secret", apiAuthority(),
                                 "Authorization: Bearer client-own\r\n"));
  EXPECT_EQ(r.status, 502) << r.body;
  EXPECT_EQ(r.header("x-sluice-reason"), "secret_unavailable");
  EXPECT_TRUE(up_->requests().empty());
  auto ev = waitRequest("GET", "/v1/needs-secret");
  ASSERT_TRUE(ev);
  EXPECT_EQ(ev->decision, audit::Decision::kDeny);
  EXPECT_EQ(ev->status, r.status);
  // A request under a rule with nothing to inject still works.
  auto o = tunnel("other.test", up_->port());
  ASSERT_TRUE(o);
  EXPECT_EQ(roundTrip(*o, request("GET", "/fine", otherAuthority())).status, 200);
}

}  // namespace
}  // namespace sluice::tls_testing
