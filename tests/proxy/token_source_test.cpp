// The pure parts of tokens minted at the proxy (token_source.hpp): the grant requests, the token
// endpoint's answer, and how long a token is used. The fetch, the cache and the pipeline step
// are tested end to end in tls_test (token_test.cpp).
#include "token_source.hpp"

#include <gtest/gtest.h>

#include "sluice/policy/loader.hpp"
#include "sluice/policy/secrets.hpp"

namespace sluice::proxy {
namespace {

policy::Workflow workflow(const std::string& inject) {
  auto w = policy::parseWorkflow(
      "apiVersion: sluice/v1\n"
      "kind: Workflow\n"
      "name: wf\n"
      "egress:\n"
      "  rules:\n"
      "    - id: api\n"
      "      action: allow\n"
      "      hosts: [api.example.com]\n"
      "      tls: inspect\n"
      "      inject:\n" +
          inject +
          "    - id: auth\n"
          "      action: allow\n"
          "      hosts: [auth.example.com, oauth2.googleapis.com]\n",
      "p.yaml");
  EXPECT_TRUE(w) << w.error().str();
  return w ? std::move(*w) : policy::Workflow{};
}

TEST(TokenGrant, OAuth2ClientCredentialsWithBasicAuth) {
  auto w = workflow(
      "        oauth2:\n"
      "          token_url: https://auth.example.com/token\n"
      "          client_id: ${secret:id}\n"
      "          client_secret: ${secret:secret}\n"
      "          scope: read write\n"
      "          audience: https://api.example.com/\n");
  // RFC 6749 2.3.1: id and secret are form-encoded before Basic.
  auto store = policy::makeSecretStore({{"id", "my client"}, {"secret", "s3cr:t/+"}});
  auto g = makeTokenGrant(w.rules[0], store.get(), {});
  ASSERT_TRUE(g) << g.error().detail;
  EXPECT_EQ(g->url, "https://auth.example.com/token");
  EXPECT_EQ(g->body,
            "grant_type=client_credentials&scope=read+write&audience=https%3A%2F%2Fapi.example.com%"
            "2F");
  // base64("my+client:s3cr%3At%2F%2B")
  EXPECT_EQ(g->authorization, "Basic bXkrY2xpZW50OnMzY3IlM0F0JTJGJTJC");
  EXPECT_EQ(g->secrets, (std::vector<std::string>{"id", "secret"}));
}

TEST(TokenGrant, OAuth2CredentialsInTheBody) {
  auto w = workflow(
      "        oauth2:\n"
      "          token_url: https://auth.example.com/token\n"
      "          client_id: app\n"
      "          client_secret: ${secret:secret}\n"
      "          auth: body\n");
  auto store = policy::makeSecretStore({{"secret", "a&b"}});
  auto g = makeTokenGrant(w.rules[0], store.get(), {});
  ASSERT_TRUE(g) << g.error().detail;
  EXPECT_EQ(g->body, "grant_type=client_credentials&client_id=app&client_secret=a%26b");
  EXPECT_TRUE(g->authorization.empty());
}

TEST(TokenGrant, MissingSecretsAreNamedNotShown) {
  auto w = workflow(
      "        oauth2:\n"
      "          token_url: https://auth.example.com/token\n"
      "          client_id: app\n"
      "          client_secret: ${secret:secret}\n");
  auto g = makeTokenGrant(w.rules[0], policy::makeSecretStore({}).get(), {});
  ASSERT_FALSE(g);
  EXPECT_EQ(g.error().reason, policy::Reason::kSecretUnavailable);
  EXPECT_NE(g.error().detail.find("'secret'"), std::string::npos) << g.error().detail;
  auto none = makeTokenGrant(w.rules[0], nullptr, {});
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().detail.find("no secret store"), std::string::npos);
}

TEST(TokenGrant, GoogleKeyFileProblems) {
  auto w = workflow(
      "        google_service_account:\n"
      "          key: ${secret:sa}\n"
      "          scopes: [s1]\n");
  auto grant = [&](const std::string& key) {
    auto store = policy::makeSecretStore({{"sa", key}});
    return makeTokenGrant(w.rules[0], store.get(), {});
  };
  auto not_json = grant("not json");
  ASSERT_FALSE(not_json);
  EXPECT_EQ(not_json.error().reason, policy::Reason::kTokenUnavailable);
  EXPECT_NE(not_json.error().detail.find("not a service account's JSON key file"),
            std::string::npos);
  auto no_key = grant(R"({"client_email":"a@b"})");
  ASSERT_FALSE(no_key);
  EXPECT_NE(no_key.error().detail.find("no client_email or private_key"), std::string::npos);
  auto bad_pem = grant(R"({"client_email":"a@b","private_key":"-----BEGIN PRIVATE KEY-----"})");
  ASSERT_FALSE(bad_pem);
  EXPECT_NE(bad_pem.error().detail.find("not a PEM RSA key"), std::string::npos);
  // The key file cannot send the proxy to another token endpoint than the policy allows.
  auto elsewhere =
      grant(R"({"client_email":"a@b","private_key":"x","token_uri":"https://evil.example/token"})");
  ASSERT_FALSE(elsewhere);
  EXPECT_NE(
      elsewhere.error().detail.find("token_uri https://evil.example/token is not the token_url "
                                    "https://oauth2.googleapis.com/token the policy allows"),
      std::string::npos)
      << elsewhere.error().detail;
}

TEST(TokenResponse, ParsesABearerToken) {
  auto t = parseTokenResponse(R"({"access_token":"abc.DEF-_~+/=","token_type":"bearer",
                                  "expires_in":3600,"scope":"x"})");
  ASSERT_TRUE(t) << t.error();
  EXPECT_EQ(t->value, "abc.DEF-_~+/=");
  EXPECT_EQ(t->lifetime, std::chrono::seconds(3540));
  auto as_string = parseTokenResponse(R"({"access_token":"a","expires_in":"120"})");
  ASSERT_TRUE(as_string) << as_string.error();
  EXPECT_EQ(as_string->lifetime, std::chrono::seconds(108));
  auto no_expiry = parseTokenResponse(R"({"access_token":"a","token_type":"Bearer"})");
  ASSERT_TRUE(no_expiry);
  EXPECT_EQ(no_expiry->lifetime, std::chrono::seconds(270)) << "300 s by default, minus 10%";
}

TEST(TokenResponse, RefusesWhatCannotBeABearerToken) {
  for (const char* body :
       {R"(not json)", R"({"token":"a"})", R"({"access_token":""})", R"({"access_token":7})",
        R"({"access_token":"a\r\nX-Evil: 1"})", R"({"access_token":"a b"})",
        R"({"access_token":"a","token_type":"mac"})", R"({"access_token":"a","expires_in":0})",
        R"({"access_token":"a","expires_in":"soon"})"}) {
    auto t = parseTokenResponse(body);
    EXPECT_FALSE(t) << body;
    if (!t) {
      EXPECT_EQ(t.error().find("\"a"), std::string::npos) << "never quotes the token";
    }
  }
}

TEST(TokenResponse, UsableUntilShortlyBeforeExpiry) {
  EXPECT_EQ(usableFor(std::chrono::seconds(1)), std::chrono::milliseconds(900));
  EXPECT_EQ(usableFor(std::chrono::seconds(100)), std::chrono::seconds(90));
  EXPECT_EQ(usableFor(std::chrono::seconds(3600)), std::chrono::seconds(3540)) << "at most 60 s";
  EXPECT_EQ(usableFor(std::chrono::seconds(86400)), std::chrono::seconds(86340));
}

}  // namespace
}  // namespace sluice::proxy
