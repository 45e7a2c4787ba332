// Tokens minted at the proxy, end to end: clients CONNECT through the proxy to an inspected API
// whose rule has inject.oauth2 or inject.google_service_account; the proxy gets the token from
// a loopback token endpoint (itself allowed by a rule, reached through the same admission and
// upstream TLS verification) and sends `Authorization: Bearer TOKEN`. The endpoint counts how
// often it is asked and checks each grant (HTTP Basic client credentials; a JWT whose RS256
// signature it verifies with the test service account's public key). Every test also proves
// that no token and no client secret reached a client, an audit row or the proxy's log.
#include <gtest/gtest.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "https_upstream.hpp"
#include "proxy_test_util.hpp"
#include "sluice/policy/loader.hpp"
#include "sluice/policy/secrets.hpp"
#include "sluice/proxy/certificate_authority.hpp"
#include "sluice/proxy/proxy.hpp"
#include "tls_client.hpp"
#include "token_endpoint.hpp"

namespace sluice::tls_testing {
namespace {

namespace fs = std::filesystem;
using proxy::testing::FakeSink;

constexpr const char* kClientId = "sluice-test-client";
constexpr const char* kClientSecret = "cs-live-2b7e151628aed2a6abf7158809cf4f3c";
constexpr const char* kScope = "read write";
constexpr const char* kSaEmail = "robot@sluice-test.iam.gserviceaccount.com";
constexpr const char* kSaScope1 = "https://www.googleapis.com/auth/cloud-platform";
constexpr const char* kSaScope2 = "https://www.googleapis.com/auth/devstorage.read_only";

// The proxy's logger at trace level, captured so every line can be searched for secrets.
std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> logSink() {
  static auto sink = [] {
    auto s = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(100000);
    auto logger = spdlog::get("proxy");
    if (!logger) {
      logger = std::make_shared<spdlog::logger>("proxy", s);
      spdlog::register_logger(logger);
    } else {
      logger->sinks().push_back(s);
    }
    logger->set_level(spdlog::level::trace);
    return s;
  }();
  return sink;
}

bool contains(const std::string& hay, const std::string& needle) {
  return !needle.empty() && hay.find(needle) != std::string::npos;
}

struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};

std::string privatePem(EVP_PKEY* key) {
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr);
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  std::string pem(data, static_cast<std::size_t>(n));
  BIO_free(bio);
  return pem;
}

class TokenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    logSink();
    char tmpl[] = "/tmp/sluice-token-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ca_file_ = dir_ / "upstream-ca.pem";
    std::ofstream(ca_file_) << pki_.caPem();
    // The service account's key, made for this test.
    sa_key_.reset(EVP_RSA_gen(2048));
    ASSERT_TRUE(sa_key_);
    TokenEndpointConfig cfg{kClientId, kClientSecret,
                            kScope,    sa_key_.get(),
                            kSaEmail,  std::string(kSaScope1) + " " + kSaScope2,
                            ""};
    server_ = std::make_unique<TokenEndpoint>(
        pki_.leaf({"api.test", "gapi.test", "token.test", "private.test"}), cfg);
    google_token_url_ = "https://token.test:" + std::to_string(server_->port()) + "/google/token";
    auto ca = proxy::CertificateAuthority::createEphemeral("sluice token test CA");
    ASSERT_TRUE(ca) << ca.error();
    ca_ = *ca;
    auto w = policy::parseWorkflow(policyYaml(), "tokens.yaml");
    ASSERT_TRUE(w) << w.error().str();
    matcher_ = policy::Matcher::compile(std::make_shared<const policy::Workflow>(std::move(*w)));
    secrets_ = policy::makeSecretStore({{"client_id", kClientId},
                                        {"client_secret", kClientSecret},
                                        {"gcp_sa", serviceAccountJson()}});
    sink_ = std::make_shared<FakeSink>();
    auto resolver = std::make_shared<proxy::StaticResolver>();
    auto lo = *policy::parseIpLiteral("127.0.0.1");
    for (const char* h : {"api.test", "gapi.test", "token.test", "private.test", "tokenpriv.test"})
      resolver->add(h, {lo});
    auto p = proxy::Proxy::create(inspectingOptions(ca_, ca_file_.string()), sink_, resolver);
    ASSERT_TRUE(p) << p.error().message;
    proxy_ = std::move(*p);
    proxy::ListenerIdentity id("exec-tokens", matcher_, secrets_);
    auto port = proxy_->listen("127.0.0.1", 0, std::move(id));
    ASSERT_TRUE(port) << port.error().message;
    port_ = *port;
    proxy_->start();
  }

  void TearDown() override {
    if (proxy_) proxy_->stop();
    expectNoSecretAnywhere();
    server_.reset();
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }

  std::string policyYaml() const {
    const std::string port = std::to_string(server_->port());
    return R"(apiVersion: sluice/v1
kind: Workflow
name: tokens-test
egress:
  rules:
    - id: api
      action: allow
      hosts: [api.test]
      ports: ["1-65535"]
      allow_private: true
      cidrs: ["127.0.0.0/8"]
      tls: inspect
      inject:
        oauth2:
          token_url: https://token.test:)" +
           port + R"(/oauth/token
          client_id: ${secret:client_id}
          client_secret: ${secret:client_secret}
          scope: read write
    - id: gapi
      action: allow
      hosts: [gapi.test]
      ports: ["1-65535"]
      allow_private: true
      cidrs: ["127.0.0.0/8"]
      tls: inspect
      inject:
        google_service_account:
          key: ${secret:gcp_sa}
          scopes: [")" +
           kSaScope1 + R"(", ")" + kSaScope2 + R"("]
          token_url: )" +
           google_token_url_ + R"(
    - id: private-api
      action: allow
      hosts: [private.test]
      ports: ["1-65535"]
      allow_private: true
      cidrs: ["127.0.0.0/8"]
      tls: inspect
      inject:
        oauth2:
          token_url: https://tokenpriv.test:)" +
           port + R"(/oauth/token
          client_id: ${secret:client_id}
          client_secret: ${secret:client_secret}
    - id: token
      action: allow
      hosts: [token.test]
      ports: ["1-65535"]
      allow_private: true
      cidrs: ["127.0.0.0/8"]
      tls: inspect
      methods: [POST]
      paths: [/oauth/token, /google/token]
    - id: token-public-only
      action: allow
      hosts: [tokenpriv.test]
      ports: ["1-65535"]
)";
  }

  std::string serviceAccountJson() const {
    return nlohmann::json{
        {"type", "service_account"},       {"project_id", "sluice-test"},
        {"private_key_id", "test-key-id"}, {"private_key", privatePem(sa_key_.get())},
        {"client_email", kSaEmail},        {"token_uri", google_token_url_}}
        .dump();
  }

  // No token issued, no client secret, no private key in any row, any client's bytes, any log.
  void expectNoSecretAnywhere() {
    if (!sink_ || !server_) return;
    std::vector<std::string> secrets = server_->issued();
    secrets.push_back(kClientSecret);
    secrets.push_back(privatePem(sa_key_.get()).substr(40, 64));
    std::string rows;
    for (const auto& e : sink_->connections()) rows += e.detail + "|" + e.reason + "|" + e.host;
    for (const auto& e : sink_->requests()) {
      rows += e.path + "|" + e.reason + "|" + e.rule_id;
      for (const auto& n : e.injected_secrets) rows += "|" + n;
    }
    std::lock_guard lock(transcript_mu_);
    for (const auto& s : secrets) {
      EXPECT_FALSE(contains(rows, s)) << "an audit row holds a secret";
      EXPECT_FALSE(contains(transcript_, s)) << "a client received a secret";
      for (const auto& line : logSink()->last_formatted())
        EXPECT_FALSE(contains(line, s)) << "log line: " << line;
    }
  }

  // CONNECT + TLS handshake to `host` at the server's port, collecting what it reads.
  std::unique_ptr<ProxyClient> tunnel(const std::string& host, std::string* transcript) {
    auto c = std::make_unique<ProxyClient>(port_, transcript);
    EXPECT_TRUE(c->ok());
    auto r = c->connect(host + ":" + std::to_string(server_->port()));
    EXPECT_EQ(r.status, 200) << r.body;
    if (r.status != 200) return nullptr;
    std::string why;
    bool ok = c->handshake(ca_->certificate(), host, host, &why);
    EXPECT_TRUE(ok) << why;
    return ok ? std::move(c) : nullptr;
  }

  HttpResponse get(ProxyClient& c, const std::string& host, const std::string& path,
                   const std::string& extra = "") {
    EXPECT_TRUE(c.send(request("GET", path, host + ":" + std::to_string(server_->port()), extra)));
    return c.readResponse();
  }

  void keep(const std::string& bytes) {
    std::lock_guard lock(transcript_mu_);
    transcript_ += bytes;
  }

  TestPki pki_;
  fs::path dir_;
  fs::path ca_file_;
  std::unique_ptr<EVP_PKEY, PkeyFree> sa_key_;
  std::unique_ptr<TokenEndpoint> server_;
  std::string google_token_url_;
  std::shared_ptr<proxy::CertificateAuthority> ca_;
  std::shared_ptr<const policy::Matcher> matcher_;
  std::shared_ptr<const policy::SecretStore> secrets_;
  std::shared_ptr<FakeSink> sink_;
  std::unique_ptr<proxy::Proxy> proxy_;
  std::uint16_t port_ = 0;
  std::mutex transcript_mu_;
  std::string transcript_;  // every byte every client of this test received
};

std::string echoedAuthorization(const HttpResponse& r) { return r.header("x-echo-authorization"); }

TEST_F(TokenTest, OAuth2TokenIsMintedInjectedAndAudited) {
  std::string seen;
  auto c = tunnel("api.test", &seen);
  ASSERT_TRUE(c);
  auto r = get(*c, "api.test", "/v1/data", "Authorization: Bearer forged-by-the-sandbox\r\n");
  keep(seen);
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(server_->grants(), 1);
  EXPECT_EQ(server_->badGrants(), 0) << "Basic client_id:client_secret, grant_type, scope";
  const auto issued = server_->issued();
  ASSERT_EQ(issued.size(), 1u);
  EXPECT_EQ(server_->apiAuthorizations(), std::vector<std::string>{"Bearer " + issued[0]})
      << "the client's Authorization is replaced by exactly the minted one";
  // The upstream reflected the token in a header: the client gets it redacted.
  EXPECT_EQ(echoedAuthorization(r), "Bearer [redacted by sluice]");
  auto echo = nlohmann::json::parse(r.body);
  EXPECT_EQ(echo["authorization_sha256"], sha256Hex("Bearer " + issued[0]));

  auto api = sink_->waitRequest([](const audit::RequestEvent& e) { return e.path == "/v1/data"; });
  ASSERT_TRUE(api);
  EXPECT_EQ(api->rule_id, "api");
  EXPECT_EQ(api->status, 200);
  EXPECT_EQ(api->injected_secrets, (std::vector<std::string>{"client_id", "client_secret"}));
  // The proxy's own fetch: a connections row of kind token and its requests row.
  auto fetch =
      sink_->waitRequest([](const audit::RequestEvent& e) { return e.path == "/oauth/token"; });
  ASSERT_TRUE(fetch);
  EXPECT_EQ(fetch->method, "POST");
  EXPECT_EQ(fetch->host, "token.test");
  EXPECT_EQ(fetch->status, 200);
  EXPECT_EQ(fetch->decision, audit::Decision::kAllow);
  EXPECT_EQ(fetch->rule_id, "token");
  EXPECT_EQ(fetch->execution_id, "exec-tokens");
  auto conn = sink_->waitConnection(
      [](const audit::ConnectionEvent& e) { return e.kind == audit::ConnectionKind::kToken; });
  ASSERT_TRUE(conn);
  EXPECT_EQ(conn->id, fetch->connection_id);
  EXPECT_EQ(conn->decision, audit::Decision::kAllow);
  EXPECT_EQ(conn->rule_id, "token");
  EXPECT_EQ(conn->resolved_ip, "127.0.0.1");
  EXPECT_EQ(conn->tls, audit::TlsHandling::kInspect);
  EXPECT_EQ(conn->detail, "the proxy's own token request for rule api (inject.oauth2)");
  EXPECT_GT(conn->bytes_down, 0u);
}

TEST_F(TokenTest, OneFetchForAHundredConcurrentRequests) {
  // The answer is held back so the first requests of every connection overlap the fetch.
  server_->setDelay(std::chrono::milliseconds(300));
  constexpr int kConnections = 10;
  constexpr int kPerConnection = 10;
  std::atomic<int> ok{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < kConnections; ++i) {
    clients.emplace_back([&, i] {
      std::string seen;
      auto c = tunnel("api.test", &seen);
      if (!c) return;
      for (int j = 0; j < kPerConnection; ++j) {  // the first fresh, the rest kept alive
        auto r = get(*c, "api.test", "/v1/item/" + std::to_string(i) + "-" + std::to_string(j));
        if (r.status == 200) ok++;
      }
      keep(seen);
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(ok.load(), kConnections * kPerConnection);
  EXPECT_EQ(server_->grants(), 1) << "one fetch, every other request waited for it";
  const auto issued = server_->issued();
  ASSERT_EQ(issued.size(), 1u);
  const auto auths = server_->apiAuthorizations();
  EXPECT_EQ(auths.size(), static_cast<std::size_t>(kConnections * kPerConnection));
  for (const auto& a : auths) EXPECT_EQ(a, "Bearer " + issued[0]);
}

TEST_F(TokenTest, ExpiredTokenIsFetchedAgain) {
  server_->setExpiresIn(1);  // used for 0.9 s (10% margin)
  std::string seen;
  auto c = tunnel("api.test", &seen);
  ASSERT_TRUE(c);
  EXPECT_EQ(get(*c, "api.test", "/v1/a").status, 200);
  EXPECT_EQ(server_->grants(), 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  server_->setExpiresIn(3600);
  EXPECT_EQ(get(*c, "api.test", "/v1/b").status, 200);  // kept alive
  EXPECT_EQ(server_->grants(), 2);
  std::string seen2;
  auto fresh = tunnel("api.test", &seen2);
  ASSERT_TRUE(fresh);
  EXPECT_EQ(get(*fresh, "api.test", "/v1/c").status, 200);  // a fresh connection: cached
  keep(seen + seen2);
  EXPECT_EQ(server_->grants(), 2);
  const auto issued = server_->issued();
  ASSERT_EQ(issued.size(), 2u);
  EXPECT_EQ(server_->apiAuthorizations(),
            (std::vector<std::string>{"Bearer " + issued[0], "Bearer " + issued[1],
                                      "Bearer " + issued[1]}));
}

TEST_F(TokenTest, FailedTokenEndpointRefusesThenRecovers) {
  server_->setFailing(true);
  std::string seen;
  auto c = tunnel("api.test", &seen);
  ASSERT_TRUE(c);
  auto r = get(*c, "api.test", "/v1/down");
  EXPECT_EQ(r.status, 502);
  EXPECT_EQ(r.header("x-sluice-reason"), "token_unavailable");
  auto body = nlohmann::json::parse(r.body);
  EXPECT_EQ(body["rule"], "api");
  EXPECT_NE(body["detail"].get<std::string>().find("the token endpoint answered 500"),
            std::string::npos)
      << body;
  EXPECT_TRUE(server_->apiAuthorizations().empty()) << "nothing went to the API without a token";
  // The connection stays usable; within the 1 s backoff the failure is answered without
  // asking again (not asserted: a loaded machine may take longer than that between requests).
  EXPECT_EQ(get(*c, "api.test", "/v1/down").status, 502);
  const int failed = server_->grants();
  EXPECT_GE(failed, 1);
  server_->setFailing(false);
  int status = 0;
  for (int i = 0; i < 50 && status != 200; ++i) {
    status = get(*c, "api.test", "/v1/up").status;
    if (status != 200) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  keep(seen);
  EXPECT_EQ(status, 200);
  EXPECT_EQ(server_->grants(), failed + 1) << "the failed fetches, then exactly one that worked";
  const auto issued = server_->issued();
  ASSERT_EQ(issued.size(), 1u);
  EXPECT_EQ(server_->apiAuthorizations().back(), "Bearer " + issued[0]);
  auto row = sink_->waitRequest([](const audit::RequestEvent& e) {
    return e.path == "/v1/down" && e.reason == "token_unavailable";
  });
  ASSERT_TRUE(row);
  EXPECT_EQ(row->status, 502);
  auto fetch = sink_->waitRequest(
      [](const audit::RequestEvent& e) { return e.path == "/oauth/token" && e.status == 500; });
  EXPECT_TRUE(fetch) << "the failed fetch has its row";
}

TEST_F(TokenTest, TokenEndpointAddressIsVettedLikeAnyOther) {
  // tokenpriv.test is allowed by name, but resolves to a private address its rule does not
  // allow: the proxy's own fetch is refused by the SSRF guard like a sandbox's request.
  std::string seen;
  auto c = tunnel("private.test", &seen);
  ASSERT_TRUE(c);
  auto r = get(*c, "private.test", "/v1/x");
  keep(seen);
  EXPECT_EQ(r.status, 502);
  EXPECT_EQ(r.header("x-sluice-reason"), "token_unavailable");
  EXPECT_NE(r.body.find("private_address"), std::string::npos) << r.body;
  EXPECT_EQ(server_->grants(), 0);
  auto conn = sink_->waitConnection([](const audit::ConnectionEvent& e) {
    return e.kind == audit::ConnectionKind::kToken && e.host == "tokenpriv.test";
  });
  ASSERT_TRUE(conn);
  EXPECT_EQ(conn->decision, audit::Decision::kDeny);
  EXPECT_EQ(conn->reason, "private_address");
}

TEST_F(TokenTest, DifferentCredentialsNeverShareAToken) {
  std::string seen;
  auto c = tunnel("api.test", &seen);
  ASSERT_TRUE(c);
  ASSERT_EQ(get(*c, "api.test", "/v1/a").status, 200);
  // A second listener of the same workflow with the same credentials shares the token...
  auto same =
      proxy_->listen("127.0.0.1", 0, proxy::ListenerIdentity("exec-same", matcher_, secrets_));
  ASSERT_TRUE(same);
  // ...one with another client secret does not: its own fetch, which the endpoint refuses.
  auto other_secrets = policy::makeSecretStore(
      {{"client_id", kClientId}, {"client_secret", "another-secret-value"}, {"gcp_sa", "{}"}});
  auto other = proxy_->listen("127.0.0.1", 0,
                              proxy::ListenerIdentity("exec-other", matcher_, other_secrets));
  ASSERT_TRUE(other);
  auto via = [&](std::uint16_t proxy_port) {
    ProxyClient pc(proxy_port, &seen);
    auto cr = pc.connect("api.test:" + std::to_string(server_->port()));
    EXPECT_EQ(cr.status, 200);
    EXPECT_TRUE(pc.handshake(ca_->certificate(), "api.test", "api.test"));
    return get(pc, "api.test", "/v1/b");
  };
  EXPECT_EQ(via(*same).status, 200);
  EXPECT_EQ(server_->grants(), 1);
  auto refused = via(*other);
  keep(seen);
  EXPECT_EQ(refused.status, 502);
  EXPECT_NE(refused.body.find("the token endpoint answered 401"), std::string::npos)
      << refused.body;
  EXPECT_EQ(server_->grants(), 2);
  EXPECT_EQ(server_->badGrants(), 1);
}

TEST_F(TokenTest, GoogleServiceAccountJwtIsSignedAndTheTokenInjected) {
  std::string seen;
  auto c = tunnel("gapi.test", &seen);
  ASSERT_TRUE(c);
  auto r = get(*c, "gapi.test", "/storage/v1/b");
  auto again = get(*c, "gapi.test", "/storage/v1/b/x");
  keep(seen);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(again.status, 200);
  EXPECT_EQ(server_->grants(), 1);
  EXPECT_EQ(server_->badGrants(), 0)
      << "RS256 signature verified with the key's public half; iss, scope, aud, iat, exp, kid";
  const auto issued = server_->issued();
  ASSERT_EQ(issued.size(), 1u);
  EXPECT_EQ(server_->apiAuthorizations(),
            (std::vector<std::string>{"Bearer " + issued[0], "Bearer " + issued[0]}));
  EXPECT_EQ(echoedAuthorization(r), "Bearer [redacted by sluice]");
  auto conn = sink_->waitConnection(
      [](const audit::ConnectionEvent& e) { return e.kind == audit::ConnectionKind::kToken; });
  ASSERT_TRUE(conn);
  EXPECT_EQ(conn->detail,
            "the proxy's own token request for rule gapi (inject.google_service_account)");
  auto api =
      sink_->waitRequest([](const audit::RequestEvent& e) { return e.path == "/storage/v1/b"; });
  ASSERT_TRUE(api);
  EXPECT_EQ(api->injected_secrets, std::vector<std::string>{"gcp_sa"});
}

}  // namespace
}  // namespace sluice::tls_testing
