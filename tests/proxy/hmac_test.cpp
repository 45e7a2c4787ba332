// inject.hmac end to end: Python's http.client and urllib send requests through the inspecting
// proxy to a Python TLS upstream that verifies each signature with Python's own hmac module
// (tests/proxy/hmac_through_proxy.py): the GitHub-webhook scheme, "timestamp.body", and a
// SHA-512/base64 signature over method, path, query, timestamp and body hash; fresh and
// kept-alive connections, Content-Length and chunked bodies. The key never reaches the client,
// an audit row or a log line.
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>

#include <nlohmann/json.hpp>

#include "hmac_signature.hpp"
#include "inspecting_fixture.hpp"
#include "tls_client.hpp"

namespace sluice::tls_testing {
namespace {

constexpr const char* kKey = "whsec-hmac-test-3b9d1f0a7c5e";

constexpr const char* kPolicy = R"(apiVersion: sluice/v1
kind: Workflow
name: tls-hmac
egress:
  rules:
    - id: hook
      action: allow
      hosts: [hook.test]
      ports: ["1-65535"]
      allow_private: true
      cidrs: ["127.0.0.0/8"]
      tls: inspect
      inject:
        hmac:
          key: ${secret:hook_key}
          header: X-Hub-Signature-256
          prefix: "sha256="
          message: "${body}"
    - id: stamp
      action: allow
      hosts: [stamp.test]
      ports: ["1-65535"]
      allow_private: true
      cidrs: ["127.0.0.0/8"]
      tls: inspect
      inject:
        hmac:
          key: ${secret:hook_key}
          header: X-Signature
          timestamp_header: X-Timestamp
          message: "${timestamp}.${body}"
    - id: sig
      action: allow
      hosts: [sig.test]
      ports: ["1-65535"]
      allow_private: true
      cidrs: ["127.0.0.0/8"]
      tls: inspect
      inject:
        hmac:
          key: ${secret:hook_key}
          algorithm: sha512
          encoding: base64
          header: X-Signature
          timestamp_header: X-Timestamp
          message: "${method}\n${path}\n${query}\n${timestamp}\n${body_sha256}"
)";

std::string slurp(FILE* f) {
  std::string out;
  char buf[4096];
  for (std::size_t n; (n = fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
  return out;
}

class HmacTest : public InspectingProxyTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(startProxy(kPolicy, {"hook.test", "stamp.test", "sig.test"},
                                       {{"hook_key", kKey}}, "exec-tls-hmac"));
  }

  // Runs the Python clients and verifying upstream; their JSON verdicts.
  nlohmann::json runClients() {
    ::setenv("HMAC_TEST_KEY", kKey, 1);  // the verifying upstream's copy of the key
    const std::string cmd = "python3 " SLUICE_SOURCE_DIR "/tests/proxy/hmac_through_proxy.py " +
                            std::to_string(port_) + " " + (dir_ / "proxy-ca.pem").string() + " " +
                            (dir_ / "upstream.pem").string() + " " +
                            (dir_ / "upstream.key").string() + " 2>&1";
    FILE* f = ::popen(cmd.c_str(), "r");
    EXPECT_NE(f, nullptr);
    if (!f) return {};
    output_ = slurp(f);
    EXPECT_EQ(::pclose(f), 0) << output_;
    ::unsetenv("HMAC_TEST_KEY");
    auto j = nlohmann::json::parse(output_, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << output_;
    return j;
  }

  std::string output_;
};

TEST_F(HmacTest, UpstreamVerifiesEverySchemeThroughTheProxy) {
  auto r = runClients();
  for (const char* name : {"hook_fresh", "stamp_fresh", "hook_kept_1", "hook_kept_chunked",
                           "hook_kept_forged", "hook_kept_empty", "stamp_kept_1",
                           "stamp_kept_chunked", "sig_get", "sig_post", "hook_urllib"}) {
    ASSERT_TRUE(r.contains(name)) << name << ": " << output_;
    EXPECT_EQ(r[name].value("status", 0), 200) << name << ": " << r[name].dump();
    EXPECT_TRUE(r[name].value("verified", false)) << name << ": " << r[name].dump();
  }
  // The chunked bodies were read whole and forwarded with a Content-Length.
  EXPECT_EQ(r["hook_kept_chunked"].value("framing", ""), "length");
  EXPECT_EQ(r["stamp_kept_chunked"].value("framing", ""), "length");
  proxy_->stop();
  bool named = false;
  for (const auto& e : sink_->requests()) {
    EXPECT_EQ(e.decision, audit::Decision::kAllow) << e.path;
    if (e.host == "hook.test" && e.injected_secrets == std::vector<std::string>{"hook_key"})
      named = true;
    EXPECT_EQ((e.method + e.host + e.path + e.reason).find(kKey), std::string::npos);
  }
  EXPECT_TRUE(named) << "the requests rows name the key's secret";
  EXPECT_EQ(output_.find(kKey), std::string::npos) << "the client saw the key";
}

TEST_F(HmacTest, BodyOverTheBoundIsRefusedWith413) {
  auto c = std::make_unique<ProxyClient>(port_, nullptr, std::chrono::seconds(10));
  HttpsUpstream up(pki_.leaf({"hook.test"}));
  const std::string authority = "hook.test:" + std::to_string(up.port());
  ASSERT_EQ(c->connect(authority).status, 200);
  std::string why;
  ASSERT_TRUE(c->handshake(ca_->certificate(), "hook.test", "hook.test", &why)) << why;
  ASSERT_TRUE(c->send(request("POST", "/hook", authority, "", std::string((1 << 20) + 1, 'x'))));
  auto r = c->readResponse();
  EXPECT_EQ(r.status, 413) << r.body;
  EXPECT_EQ(r.header("x-sluice-reason"), "body_too_large");
  EXPECT_NE(r.body.find("sign it"), std::string::npos) << r.body;
  EXPECT_TRUE(up.requests().empty());
}

// The signer against RFC 4231 test case 2 ("Jefe", "what do ya want for nothing?").
TEST(HmacSignature, MatchesRfc4231) {
  const std::vector<std::string_view> msg = {"what do ya want ", "for nothing?"};
  auto hex = [](const std::string& raw) {
    std::string out;
    char b[3];
    for (unsigned char c : raw) {
      snprintf(b, sizeof b, "%02x", c);
      out += b;
    }
    return out;
  };
  EXPECT_EQ(hex(proxy::hmacDigest(policy::HmacSigning::Algorithm::kSha256, "Jefe", msg)),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(hex(proxy::hmacDigest(policy::HmacSigning::Algorithm::kSha512, "Jefe", msg)),
            "164b7a7bfcf819e2e395fbe73b56e0a387bd64222e831fd610270cd7ea2505549758bf75c05a994a6d034"
            "f65f8f0e6fdcaeab1a34d4a6b4b636e070a38bce737");
}

TEST(HmacSignature, ExpandsTheTemplateAndEncodes) {
  policy::HmacSigning h;
  h.key_secret = "k";
  h.header = "X-Sig";
  h.prefix = "v1=";
  h.timestamp_header = "X-Ts";
  h.encoding = policy::HmacSigning::Encoding::kBase64;
  h.message = "${method} ${path}?${query} ${timestamp} ${body_sha256} ${body}";
  auto store = policy::makeSecretStore({{"k", "key"}});
  proxy::HmacParts parts{"POST", "/a", "x=1", "body", 1700000000};
  auto headers = proxy::hmacHeaders(h, parts, store.get());
  ASSERT_TRUE(headers) << headers.error();
  ASSERT_EQ(headers->size(), 2u);
  const std::string message =
      "POST /a?x=1 1700000000 " +
      std::string("230d8358dc8e8890b4c58deeb62912ee2f20357ae92a5cc861b98e68fe31acb5") + " body";
  std::string raw = proxy::hmacDigest(h.algorithm, "key", {message});
  std::string b64(4 * ((raw.size() + 2) / 3) + 1, '\0');
  b64.resize(static_cast<std::size_t>(
      EVP_EncodeBlock(reinterpret_cast<unsigned char*>(b64.data()),
                      reinterpret_cast<const unsigned char*>(raw.data()), raw.size())));
  EXPECT_EQ((*headers)[0], (std::pair<std::string, std::string>{"X-Sig", "v1=" + b64}));
  EXPECT_EQ((*headers)[1], (std::pair<std::string, std::string>{"X-Ts", "1700000000"}));
  auto missing = proxy::hmacHeaders(h, parts, policy::makeSecretStore({}).get());
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().find("'k'"), std::string::npos);
}

}  // namespace
}  // namespace sluice::tls_testing
