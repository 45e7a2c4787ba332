// HTTP/2 under TLS inspection, end to end with a real client: curl (--http2) CONNECTs through
// the proxy, negotiates h2 with the leaf the proxy mints, and its streams reach a loopback
// HTTPS HTTP/1.1 upstream that records what it received. Each stream is decided, injected and
// audited on its own; a refused stream gets its refusal while its siblings on the same
// connection go on.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "https_upstream.hpp"
#include "proxy_test_util.hpp"
#include "sluice/policy/loader.hpp"
#include "sluice/policy/secrets.hpp"
#include "sluice/proxy/certificate_authority.hpp"
#include "sluice/proxy/proxy.hpp"

namespace sluice::tls_testing {
namespace {

namespace fs = std::filesystem;
using proxy::testing::FakeSink;

constexpr const char* kSecret = "sk-h2-3b9d0c7e15a24f68";
constexpr std::size_t kMaxHeader = 16 * 1024;

constexpr const char* kPolicy = R"(apiVersion: sluice/v1
kind: Workflow
name: h2-test
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
      paths: ["/v1/*"]
      inject:
        headers:
          Authorization: "Bearer ${secret:api_token}"
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
      inject:
        headers:
          X-Other-Key: "${secret:other_key}"
        placeholder_env: OTHER_TOKEN
  limits:
    max_requests: 12
)";

// One transfer as curl reports it (-w).
struct Transfer {
  int status = 0;
  std::string version;  // "2" for HTTP/2
  std::string body;
  std::string reason;  // its X-Sluice-Reason header ("" when none)
};

// A free loopback port: nghttpd takes a port number, not 0.
std::uint16_t freePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// nghttpd (nghttp2's server, which speaks only h2) on loopback with a test certificate, serving
// `dir` and echoing uploads; -v writes every frame it receives (headers included) to `log`.
class Nghttpd {
 public:
  Nghttpd(const fs::path& dir, const ServerCert& cert) : port_(freePort()) {
    std::ofstream(dir / "nghttpd.key") << cert.key_pem;
    std::ofstream(dir / "nghttpd.crt") << cert.cert_pem;
    log_ = dir / "nghttpd.log";
    pid_ = ::fork();
    if (pid_ == 0) {
      std::freopen(log_.c_str(), "w", stdout);
      ::dup2(::fileno(stdout), 2);
      const std::string docs = "--htdocs=" + (dir / "htdocs").string();
      const std::string port = std::to_string(port_);
      ::execlp("nghttpd", "nghttpd", "-v", "--echo-upload", "-a", "127.0.0.1", docs.c_str(),
               port.c_str(), (dir / "nghttpd.key").c_str(), (dir / "nghttpd.crt").c_str(),
               static_cast<char*>(nullptr));
      ::_exit(127);
    }
    for (int i = 0; i < 100 && !listening(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ~Nghttpd() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  std::uint16_t port() const { return port_; }
  bool listening() const {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port_);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    return ok;
  }
  std::string log() const {
    std::ifstream in(log_);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

 private:
  std::uint16_t port_;
  fs::path log_;
  pid_t pid_ = -1;
};

class H2Test : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sluice-h2-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    std::ofstream(dir_ / "upstream-ca.pem") << pki_.caPem();
    up_ = std::make_unique<HttpsUpstream>(pki_.leaf({"api.test", "other.test"}));
    auto ca = proxy::CertificateAuthority::createEphemeral("sluice h2 test CA");
    ASSERT_TRUE(ca) << ca.error();
    std::ofstream(dir_ / "proxy-ca.pem") << (*ca)->certificatePem();

    auto w = policy::parseWorkflow(kPolicy, "h2-test.yaml");
    ASSERT_TRUE(w) << w.error().str();
    auto workflow = std::make_shared<const policy::Workflow>(std::move(*w));
    sink_ = std::make_shared<FakeSink>();
    auto resolver = std::make_shared<proxy::StaticResolver>();
    for (const char* h : {"api.test", "other.test"})
      resolver->add(h, {*policy::parseIpLiteral("127.0.0.1")});
    auto options = inspectingOptions(*ca, (dir_ / "upstream-ca.pem").string());
    options.max_header_bytes = kMaxHeader;
    auto p = proxy::Proxy::create(std::move(options), sink_, resolver);
    ASSERT_TRUE(p) << p.error().message;
    proxy_ = std::move(*p);
    proxy::ListenerIdentity id;
    id.execution_id = "exec-h2";
    id.matcher = policy::Matcher::compile(workflow);
    id.secrets = policy::makeSecretStore({{"api_token", kSecret}, {"other_key", "other-value"}});
    placeholders_ = proxy::makePlaceholders(*workflow);
    id.placeholders = placeholders_;
    auto port = proxy_->listen("127.0.0.1", 0, std::move(id));
    ASSERT_TRUE(port) << port.error().message;
    port_ = *port;
    proxy_->start();
    if (getenv("H2_DEBUG")) spdlog::set_level(spdlog::level::trace);
  }

  void TearDown() override {
    if (proxy_) proxy_->stop();
    for (const auto& e : sink_->requests()) EXPECT_EQ(e.path.find(kSecret), std::string::npos);
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }

  std::string url(const std::string& host, const std::string& path) const {
    return "https://" + host + ":" + std::to_string(up_->port()) + path;
  }

  // An h2-only upstream serving htdocs/v1/data ("hello from h2") and htdocs/v1/big.
  std::unique_ptr<Nghttpd> startNghttpd() {
    fs::create_directories(dir_ / "htdocs" / "v1");
    std::ofstream(dir_ / "htdocs" / "v1" / "data") << "hello from h2";
    std::ofstream(dir_ / "htdocs" / "v1" / "big") << std::string(4 * 1024 * 1024, 'b');
    auto d = std::make_unique<Nghttpd>(dir_, pki_.leaf({"api.test"}));
    EXPECT_TRUE(d->listening());
    return d;
  }
  std::string h2url(const Nghttpd& d, const std::string& path) const {
    return "https://api.test:" + std::to_string(d.port()) + path;
  }

  // Runs curl --http2 through the proxy for `urls` (in parallel, multiplexed on one
  // connection, when `parallel`), with `extra` options; one Transfer per URL, in order.
  std::vector<Transfer> curl(const std::vector<std::string>& urls, bool parallel = false,
                             const std::string& extra = "") {
    std::string cmd =
        "curl --http2 -sS --no-progress-meter --max-time 20 --proxy http://127.0.0.1:" +
        std::to_string(port_) + " --cacert " + (dir_ / "proxy-ca.pem").string() +
        (parallel ? " --parallel --parallel-max 10" : "") + " " + extra +
        " -w '%{url_effective} %{http_code} %{http_version} "
        "[%header{x-sluice-reason}]\\n'";
    for (std::size_t i = 0; i < urls.size(); ++i)
      cmd += " -o " + (dir_ / ("body" + std::to_string(i))).string() + " '" + urls[i] + "'";
    std::vector<Transfer> out(urls.size());
    FILE* f = ::popen((cmd + " 2>&1").c_str(), "r");
    if (!f) return out;
    char line[1024];
    while (std::fgets(line, sizeof line, f)) {
      std::istringstream in(line);
      std::string u;
      Transfer t;
      in >> u >> t.status >> t.version >> t.reason;
      auto it = std::find(urls.begin(), urls.end(), u);
      if (it == urls.end()) {
        // curl's parallel progress lines carry carriage returns; its errors are reported.
        if (std::string_view(line).find("curl:") != std::string_view::npos) ADD_FAILURE() << line;
        continue;
      }
      auto& x = out[static_cast<std::size_t>(it - urls.begin())];
      x.status = t.status;
      x.version = t.version;
      x.reason = t.reason.size() >= 2 ? t.reason.substr(1, t.reason.size() - 2) : "";
    }
    ::pclose(f);
    for (std::size_t i = 0; i < urls.size(); ++i)
      out[i].body = slurp(dir_ / ("body" + std::to_string(i)));
    return out;
  }

  static std::string slurp(const fs::path& p) {
    std::ifstream in(p);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  std::optional<audit::RequestEvent> waitRequest(const std::string& path) {
    return sink_->waitRequest([&](const audit::RequestEvent& e) { return e.path == path; });
  }

  TestPki pki_;
  fs::path dir_;
  std::unique_ptr<HttpsUpstream> up_;
  std::shared_ptr<FakeSink> sink_;
  std::unique_ptr<proxy::Proxy> proxy_;
  std::uint16_t port_ = 0;
  std::vector<proxy::Placeholder> placeholders_;  // OTHER_TOKEN, of rule `other`
};

TEST_F(H2Test, AllowedStreamArrivesWithInjectedHeader) {
  auto t = curl({url("api.test", "/v1/data?x=1")});
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].status, 200) << t[0].body;
  EXPECT_EQ(t[0].version, "2") << "the proxy selected h2 in ALPN";

  auto got = up_->requests();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].method, "GET");
  EXPECT_EQ(got[0].target, "/v1/data?x=1");
  EXPECT_EQ(got[0].header("Host"), "api.test:" + std::to_string(up_->port()));
  EXPECT_EQ(got[0].values("Authorization"),
            std::vector<std::string>{std::string("Bearer ") + kSecret});
  EXPECT_EQ(t[0].body.find(kSecret), std::string::npos);

  auto ev = waitRequest("/v1/data");
  ASSERT_TRUE(ev);
  EXPECT_EQ(ev->method, "GET");
  EXPECT_EQ(ev->host, "api.test");
  EXPECT_EQ(ev->status, 200);
  EXPECT_EQ(ev->decision, audit::Decision::kAllow);
  EXPECT_EQ(ev->rule_id, "api");
  EXPECT_EQ(ev->injected_secrets, std::vector<std::string>{"api_token"});
  auto forwards = sink_->forwards();  // the write-ahead row, before the stream went upstream
  ASSERT_EQ(forwards.size(), 1u);
  EXPECT_EQ(forwards[0].path, "/v1/data");
  EXPECT_EQ(forwards[0].connection_id, ev->connection_id);
  auto conn =
      sink_->waitConnection([](const audit::ConnectionEvent& e) { return e.host == "api.test"; });
  ASSERT_TRUE(conn);
  EXPECT_EQ(conn->tls, audit::TlsHandling::kInspect);
  EXPECT_EQ(conn->id, ev->connection_id);
}

TEST_F(H2Test, DeniedStreamGets403WhileItsSiblingsSucceed) {
  auto t = curl({url("api.test", "/v1/admin/users"), url("api.test", "/v1/one"),
                 url("api.test", "/v2/nope"), url("api.test", "/v1/two")},
                /*parallel=*/true);
  ASSERT_EQ(t.size(), 4u);
  EXPECT_EQ(t[0].status, 403) << t[0].body;
  EXPECT_EQ(t[0].reason, "denied_by_rule");
  EXPECT_EQ(t[1].status, 200) << t[1].body;
  EXPECT_EQ(t[2].status, 403) << t[2].body;
  EXPECT_EQ(t[2].reason, "path_not_allowed");
  EXPECT_EQ(t[3].status, 200) << t[3].body;
  for (const auto& x : t) EXPECT_EQ(x.version, "2");

  // Only the allowed streams reached the upstream.
  std::multiset<std::string> targets;
  for (const auto& r : up_->requests()) targets.insert(r.target);
  EXPECT_EQ(targets, (std::multiset<std::string>{"/v1/one", "/v1/two"}));

  // One requests row per stream, all on the one tunnel.
  auto denied = waitRequest("/v1/admin/users");
  auto other = waitRequest("/v2/nope");
  auto one = waitRequest("/v1/one");
  auto two = waitRequest("/v1/two");
  ASSERT_TRUE(denied && other && one && two);
  EXPECT_EQ(denied->decision, audit::Decision::kDeny);
  EXPECT_EQ(denied->rule_id, "api-admin");
  EXPECT_EQ(denied->reason, "denied_by_rule");
  EXPECT_EQ(denied->status, 403);
  EXPECT_EQ(other->reason, "path_not_allowed");
  EXPECT_EQ(one->status, 200);
  EXPECT_EQ(two->status, 200);
  std::multiset<std::string> forwarded;
  for (const auto& f : sink_->forwards()) forwarded.insert(f.path);
  EXPECT_EQ(forwarded, (std::multiset<std::string>{"/v1/one", "/v1/two"}));
  proxy_->stop();
  // Refused streams name the tunnel; an allowed one the upstream connection it went out on:
  // the tunnel's own, or one the pool opened for it (whose row names the tunnel).
  std::size_t tunnels = 0;
  std::string tunnel;
  for (const auto& c : sink_->connections())
    if (c.host == "api.test" && c.detail.find("HTTP/2 streams") == std::string::npos) {
      ++tunnels;
      tunnel = c.id;
    }
  EXPECT_EQ(tunnels, 1u) << "curl multiplexed every stream on one tunnel";
  EXPECT_EQ(denied->connection_id, tunnel);
  EXPECT_EQ(other->connection_id, tunnel);
  for (const auto* allowed : {&*one, &*two}) {
    if (allowed->connection_id == tunnel) continue;
    const auto row = sink_->waitConnection(
        [&](const audit::ConnectionEvent& c) { return c.id == allowed->connection_id; });
    ASSERT_TRUE(row);
    EXPECT_EQ(row->detail, "opened by the proxy for the HTTP/2 streams of connection " + tunnel);
  }
}

// Six streams hold every pooled upstream connection (the tunnel's and five dialled); a stream
// the policy refuses is answered at once, without waiting for one of them, and an allowed one
// waits until a connection comes back (Node's http2 client, tests/proxy/h2_pool_client.mjs).
TEST_F(H2Test, ARefusedStreamNeverWaitsForAPooledConnection) {
  if (::access("/usr/bin/node", X_OK) != 0) GTEST_SKIP() << "node is not installed";
  const fs::path go = dir_ / "go";
  const std::string cmd =
      "PROXY_PORT=" + std::to_string(port_) + " PROXY_CA=" + (dir_ / "proxy-ca.pem").string() +
      " HOST=api.test PORT=" + std::to_string(up_->port()) + " GO_FILE=" + go.string() +
      " timeout 60 node " SLUICE_SOURCE_DIR "/tests/proxy/h2_pool_client.mjs 2>&1";
  std::string output;
  std::thread client([&] {
    if (FILE* f = ::popen(cmd.c_str(), "r")) {
      char line[4096];
      while (std::fgets(line, sizeof line, f)) output += line;
      ::pclose(f);
    }
  });
  for (int i = 0; i < 500 && up_->held() < 6; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(up_->held(), 6) << "six streams should hold six upstream connections";
  std::ofstream(go) << "go";
  // Answered while every connection is still held.
  auto denied =
      sink_->waitRequest([](const audit::RequestEvent& e) { return e.path == "/v1/admin/x"; },
                         std::chrono::seconds(10));
  EXPECT_TRUE(denied) << "the refused stream waited for a pooled connection";
  EXPECT_EQ(up_->held(), 6);
  up_->releaseHeld();
  client.join();
  ASSERT_TRUE(denied);
  EXPECT_EQ(denied->status, 403);
  EXPECT_EQ(denied->reason, "denied_by_rule");
  EXPECT_NE(output.find("{\"denied\":403}"), std::string::npos) << output;
  EXPECT_NE(output.find("{\"holds\":[200,200,200,200,200,200],\"queued\":200}"), std::string::npos)
      << output;
  for (const auto& r : up_->requests()) EXPECT_NE(r.target, "/v1/admin/x");

  // The five connections the pool opened have rows of their own, beside the tunnel's.
  proxy_->stop();
  std::string tunnel;
  std::vector<audit::ConnectionEvent> pooled;
  for (const auto& c : sink_->connections()) {
    if (c.host != "api.test") continue;
    if (c.detail.find("HTTP/2 streams") == std::string::npos)
      tunnel = c.id;
    else
      pooled.push_back(c);
  }
  ASSERT_FALSE(tunnel.empty());
  ASSERT_EQ(pooled.size(), 5u);
  for (const auto& c : pooled) {
    EXPECT_EQ(c.detail, "opened by the proxy for the HTTP/2 streams of connection " + tunnel);
    EXPECT_EQ(c.decision, audit::Decision::kAllow);
    EXPECT_EQ(c.rule_id, "api");
    EXPECT_EQ(c.tls, audit::TlsHandling::kInspect);
    EXPECT_EQ(c.resolved_ip, "127.0.0.1");
    EXPECT_GT(c.bytes_up, 0u);
    EXPECT_GT(c.bytes_down, 0u);
  }
  // Each allowed stream's row names the connection it went out on.
  std::set<std::string> used;
  for (const auto& e : sink_->requests())
    if (e.path.starts_with("/v1/hold/")) used.insert(e.connection_id);
  EXPECT_EQ(used.size(), 6u);
  EXPECT_TRUE(used.contains(tunnel));
}

// An HTTP/1.1 upstream's chunked trailers reach the h2 client as the stream's trailers, the
// one quoting the injected credential redacted.
TEST_F(H2Test, ChunkedTrailersOfAnHttp11UpstreamReachTheClientAsTrailers) {
  auto t = curl({url("api.test", "/v1/trailers")}, false, "-D " + (dir_ / "headers").string());
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].status, 200);
  EXPECT_EQ(t[0].version, "2");
  EXPECT_EQ(t[0].body, "hello");
  const std::string dumped = slurp(dir_ / "headers");
  EXPECT_NE(dumped.find("x-checksum: sha256-2cf24dba"), std::string::npos) << dumped;
  EXPECT_NE(dumped.find("x-reflected-authorization: Bearer [redacted by sluice]"),
            std::string::npos)
      << dumped;
  EXPECT_EQ(dumped.find(kSecret), std::string::npos) << dumped;
  // After the body: trailers, not header fields.
  const auto checksum = dumped.find("x-checksum");
  const auto header_end = dumped.find("\r\n\r\n");
  EXPECT_TRUE(checksum != std::string::npos && checksum > header_end) << dumped;
}

TEST_F(H2Test, AuthorityNamingAnotherHostIsRefused) {
  // curl sends the Host option as :authority on HTTP/2.
  auto t = curl({url("api.test", "/v1/data")}, false, "-H 'Host: other.test'");
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].status, 400) << t[0].body;
  EXPECT_EQ(t[0].reason, "host_mismatch");
  EXPECT_TRUE(up_->requests().empty());
  auto ev = waitRequest("/v1/data");
  ASSERT_TRUE(ev);
  EXPECT_EQ(ev->reason, "host_mismatch");
}

TEST_F(H2Test, RequestBodyCrossesIntact) {
  std::string body;
  for (int i = 0; body.size() < 3 * 1024 * 1024; ++i) body += std::to_string(i) + ",";
  std::ofstream(dir_ / "upload") << body;
  auto t =
      curl({url("api.test", "/v1/upload")}, false, "--data-binary @" + (dir_ / "upload").string());
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].status, 200) << t[0].body;
  auto got = up_->requests();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].method, "POST");
  EXPECT_EQ(got[0].body.size(), body.size());
  EXPECT_TRUE(got[0].body == body);
  auto ev = waitRequest("/v1/upload");
  ASSERT_TRUE(ev);
  EXPECT_EQ(ev->status, 200);
}

TEST_F(H2Test, LargeResponseStreamsToTheClient) {
  auto t = curl({url("api.test", "/v1/big/5000000")});
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].status, 200);
  EXPECT_EQ(t[0].body.size(), 5000000u);
}

TEST_F(H2Test, HeaderListOverTheLimitGets431) {
  auto t = curl({url("api.test", "/v1/data"), url("api.test", "/v1/small")}, false,
                "-H 'X-Big: " + std::string(kMaxHeader + 1000, 'a') + "'");
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].status, 431);
  EXPECT_EQ(t[0].reason, "header_too_large");
  EXPECT_TRUE(up_->requests().empty());
  auto ev = sink_->waitRequest([](const audit::RequestEvent& e) { return e.status == 431; });
  ASSERT_TRUE(ev);
  EXPECT_EQ(ev->reason, "header_too_large");
}

TEST_F(H2Test, MaxRequestsCountsEveryStream) {
  std::vector<std::string> urls;
  for (int i = 0; i < 14; ++i) urls.push_back(url("api.test", "/v1/n" + std::to_string(i)));
  auto t = curl(urls, true);
  int ok = 0, limited = 0;
  for (const auto& x : t) {
    ok += x.status == 200;
    if (x.status == 429) {
      ++limited;
      EXPECT_EQ(x.reason, "limit_exceeded");
    }
  }
  EXPECT_EQ(ok, 12) << "max_requests: 12";
  EXPECT_EQ(limited, 2);
  EXPECT_EQ(up_->requests().size(), 12u);
}

// ---------------------------------------------------------------------------------------------
// An upstream that speaks only h2: the streams are multiplexed on the tunnel's connection.

TEST_F(H2Test, H2UpstreamGetsTheStreamWithTheInjectedHeader) {
  auto d = startNghttpd();
  auto t = curl({h2url(*d, "/v1/data")});
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].status, 200);
  EXPECT_EQ(t[0].version, "2");
  EXPECT_EQ(t[0].body, "hello from h2");
  const auto log = d->log();
  EXPECT_NE(log.find(std::string("authorization: Bearer ") + kSecret), std::string::npos) << log;
  EXPECT_NE(log.find(":authority: api.test:" + std::to_string(d->port())), std::string::npos);
  auto ev = waitRequest("/v1/data");
  ASSERT_TRUE(ev);
  EXPECT_EQ(ev->status, 200);
  EXPECT_EQ(ev->rule_id, "api");
  EXPECT_EQ(ev->injected_secrets, std::vector<std::string>{"api_token"});
}

TEST_F(H2Test, H2UpstreamUploadAndDownloadStreamWithFlowControl) {
  auto d = startNghttpd();
  std::string body;
  for (int i = 0; body.size() < 3 * 1024 * 1024; ++i) body += std::to_string(i) + ";";
  std::ofstream(dir_ / "upload") << body;
  // Two uploads at once on one connection, each echoed back while it is still being sent.
  auto t = curl({h2url(*d, "/v1/echo"), h2url(*d, "/v1/echo?2")}, true,
                "--data-binary @" + (dir_ / "upload").string());
  ASSERT_EQ(t.size(), 2u);
  for (const auto& x : t) {
    EXPECT_EQ(x.status, 200);
    EXPECT_EQ(x.body.size(), body.size());
    EXPECT_TRUE(x.body == body) << "nghttpd echoes the upload";
  }
  auto big = curl({h2url(*d, "/v1/big")});
  ASSERT_EQ(big.size(), 1u);
  EXPECT_EQ(big[0].status, 200);
  EXPECT_EQ(big[0].body, std::string(4 * 1024 * 1024, 'b'));
}

// A client's request trailers reach an h2 upstream (nghttpd logs every header block it gets)
// as the stream's trailers (Node's http2 client, tests/proxy/h2_trailers_client.mjs).
TEST_F(H2Test, H2UpstreamGetsTheRequestTrailers) {
  if (::access("/usr/bin/node", X_OK) != 0) GTEST_SKIP() << "node is not installed";
  auto d = startNghttpd();
  const std::string cmd = "PROXY_PORT=" + std::to_string(port_) +
                          " PROXY_CA=" + (dir_ / "proxy-ca.pem").string() +
                          " HOST=api.test PORT=" + std::to_string(d->port()) +
                          " PATH_=/v1/data timeout 30 node " SLUICE_SOURCE_DIR
                          "/tests/proxy/h2_trailers_client.mjs 2>&1";
  std::string output;
  if (FILE* f = ::popen(cmd.c_str(), "r")) {
    char line[4096];
    while (std::fgets(line, sizeof line, f)) output += line;
    ::pclose(f);
  }
  EXPECT_NE(output.find("\"status\":200"), std::string::npos) << output;
  const std::string log = d->log();
  EXPECT_NE(log.find("authorization: Bearer " + std::string(kSecret)), std::string::npos) << log;
  const auto trailer = log.find("x-checksum: sha256-2cf24dba");
  EXPECT_NE(trailer, std::string::npos) << log;
  // After the body: a header block of its own, not a field of the request header.
  EXPECT_GT(trailer, log.find("recv DATA frame")) << log;
  EXPECT_EQ(log.find("x-checksum", trailer + 1), std::string::npos) << "sent twice: " << log;
}

// Request trailers are searched like the rest of the request: another rule's placeholder in
// one refuses the stream before its end leaves (the upstream never gets a complete request).
TEST_F(H2Test, AnotherRulesPlaceholderInARequestTrailerRefusesTheStream) {
  if (::access("/usr/bin/node", X_OK) != 0) GTEST_SKIP() << "node is not installed";
  ASSERT_EQ(placeholders_.size(), 1u);
  const std::string token = placeholders_[0].token;
  auto d = startNghttpd();
  const std::string cmd =
      "PROXY_PORT=" + std::to_string(port_) + " PROXY_CA=" + (dir_ / "proxy-ca.pem").string() +
      " HOST=api.test PORT=" + std::to_string(d->port()) +
      " PATH_=/v1/data TRAILER_TOKEN=" + token +
      " timeout 30 node " SLUICE_SOURCE_DIR "/tests/proxy/h2_trailers_client.mjs 2>&1";
  std::string output;
  if (FILE* f = ::popen(cmd.c_str(), "r")) {
    char line[4096];
    while (std::fgets(line, sizeof line, f)) output += line;
    ::pclose(f);
  }
  EXPECT_NE(output.find("\"status\":403"), std::string::npos) << output;
  EXPECT_NE(output.find("placeholder_leak"), std::string::npos) << output;
  auto row = waitRequest("/v1/data");
  ASSERT_TRUE(row);
  EXPECT_EQ(row->reason, "placeholder_leak");
  const std::string log = d->log();
  EXPECT_EQ(log.find(token), std::string::npos) << log;
  EXPECT_EQ(log.find("x-checksum"), std::string::npos) << log;
}

TEST_F(H2Test, H2UpstreamDeniedStreamDoesNotHurtItsSiblings) {
  auto d = startNghttpd();
  auto t =
      curl({h2url(*d, "/v1/admin/x"), h2url(*d, "/v1/data"), h2url(*d, "/v1/data?again")}, true);
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].status, 403);
  EXPECT_EQ(t[0].reason, "denied_by_rule");
  EXPECT_EQ(t[1].status, 200);
  EXPECT_EQ(t[1].body, "hello from h2");
  EXPECT_EQ(t[2].status, 200);
  EXPECT_EQ(d->log().find("/v1/admin/x"), std::string::npos) << "the denied stream never left";
}

}  // namespace
}  // namespace sluice::tls_testing
