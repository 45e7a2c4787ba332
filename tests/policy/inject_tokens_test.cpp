// inject.oauth2 and inject.google_service_account: what loads, every validation message with
// its FILE:LINE:COL, and the check that a token endpoint is allowed by a rule of the workflow.
#include <gtest/gtest.h>

#include "sluice/policy/loader.hpp"
#include "sluice/policy/matcher.hpp"

namespace sluice::policy {
namespace {

// A workflow with an API rule (inspected, so it may inject) whose inject block is `inject`, and
// `extra` rules after it.
std::string policy(std::string_view inject, std::string_view extra = "") {
  return std::string(
             "apiVersion: sluice/v1\n"
             "kind: Workflow\n"
             "name: wf\n"
             "egress:\n"
             "  rules:\n"
             "    - id: api\n"
             "      action: allow\n"
             "      hosts: [api.example.com]\n"
             "      tls: inspect\n"
             "      inject:\n") +
         std::string(inject) + std::string(extra);
}

constexpr std::string_view kAuthRule =
    "    - id: auth\n"
    "      action: allow\n"
    "      hosts: [auth.example.com]\n"
    "      methods: [POST]\n"
    "      paths: [/oauth/token]\n"
    "      tls: inspect\n";

constexpr std::string_view kOAuth2 =
    "        oauth2:\n"
    "          token_url: https://auth.example.com/oauth/token\n"
    "          client_id: ${secret:client_id}\n"
    "          client_secret: ${secret:client_secret}\n"
    "          scope: read write\n"
    "          audience: https://api.example.com\n";

std::string problems(std::string_view yaml) {
  auto w = parseWorkflow(yaml, "p.yaml");
  return w ? "<loaded>" : w.error().str();
}

TEST(InjectTokens, OAuth2Loads) {
  auto w = parseWorkflow(policy(kOAuth2, kAuthRule), "p.yaml");
  ASSERT_TRUE(w) << w.error().str();
  const Inject& in = w->rules[0].inject;
  ASSERT_TRUE(in.oauth2);
  EXPECT_EQ(in.oauth2->token_url, "https://auth.example.com/oauth/token");
  EXPECT_EQ(in.oauth2->client_id, "${secret:client_id}");
  EXPECT_EQ(in.oauth2->client_secret, "${secret:client_secret}");
  EXPECT_EQ(in.oauth2->scope, "read write");
  EXPECT_EQ(in.oauth2->audience, "https://api.example.com");
  EXPECT_FALSE(in.oauth2->auth_in_body);
  EXPECT_EQ(in.secret_names, (std::vector<std::string>{"client_id", "client_secret"}));
  EXPECT_TRUE(in.mintsToken());
  EXPECT_FALSE(in.empty());
  EXPECT_TRUE(w->warnings.empty());
}

TEST(InjectTokens, OAuth2AuthInBodyAndLiteralClientId) {
  auto w = parseWorkflow(policy("        oauth2:\n"
                                "          token_url: https://auth.example.com/oauth/token\n"
                                "          client_id: my-client\n"
                                "          client_secret: ${secret:cs}\n"
                                "          auth: body\n",
                                kAuthRule),
                         "p.yaml");
  ASSERT_TRUE(w) << w.error().str();
  EXPECT_TRUE(w->rules[0].inject.oauth2->auth_in_body);
  EXPECT_EQ(w->rules[0].inject.secret_names, std::vector<std::string>{"cs"});
}

TEST(InjectTokens, OAuth2Mistakes) {
  EXPECT_EQ(problems(policy("        oauth2:\n"
                            "          token_url: ftp://auth.example.com/t\n"
                            "          client_id: ${secret:id}\n"
                            "          client_secrt: x\n"
                            "          auth: digest\n",
                            kAuthRule)),
            "p.yaml:12:11: inject.oauth2 needs 'client_secret'\n"
            "p.yaml:12:22: inject.oauth2.token_url 'ftp://auth.example.com/t' is not a URL: "
            "unsupported URL scheme 'ftp' (http or https only)\n"
            "p.yaml:14:11: unknown key 'client_secrt' in inject.oauth2 (did you mean "
            "'client_secret'?)\n"
            "p.yaml:15:17: inject.oauth2.auth must be 'basic' or 'body' (got 'digest')\n");
  EXPECT_EQ(problems(policy("        oauth2:\n"
                            "          token_url: https://auth.example.com/t\n"
                            "          client_id: ${secret:bad name}\n"
                            "          client_secret: ${env:X}\n",
                            kAuthRule)),
            "p.yaml:13:22: bad secret name 'bad name' in ${secret:...} (letters, digits, '_', "
            "'-', '.')\n"
            "p.yaml:14:26: unknown reference '${env:X}' in header value (only ${secret:NAME} "
            "is supported)\n");
}

TEST(InjectTokens, OneTokenPerRuleAndNoAuthorizationHeaderBesideIt) {
  const std::string both = std::string(kOAuth2) +
                           "        google_service_account:\n"
                           "          key: ${secret:sa}\n"
                           "          scopes: [s]\n";
  EXPECT_NE(problems(policy(both, kAuthRule)).find("a rule has at most one"), std::string::npos);
  const std::string header =
      std::string("        headers: {authorization: \"x\"}\n") + std::string(kOAuth2);
  EXPECT_NE(problems(policy(header, kAuthRule))
                .find("inject.headers sets Authorization, which the token minted"),
            std::string::npos);
}

TEST(InjectTokens, TokenEndpointMustBeAllowedByARule) {
  // Without the auth rule, the token URL is decided like `policy explain` would: no rule.
  EXPECT_EQ(problems(policy(kOAuth2)),
            "p.yaml:12:22: token endpoint https://auth.example.com/oauth/token of rule 'api' "
            "(inject.oauth2) is not allowed by a rule of workflow 'wf': no_matching_rule: no "
            "rule matches host auth.example.com; add a rule that allows POST to it\n");
  // A rule that allows the host but not POST to that path (inspected) does not do either.
  const std::string get_only =
      "    - id: auth\n"
      "      action: allow\n"
      "      hosts: [auth.example.com]\n"
      "      methods: [GET]\n"
      "      tls: inspect\n";
  EXPECT_NE(problems(policy(kOAuth2, get_only)).find("method_not_allowed"), std::string::npos);
  // An ask rule cannot approve the proxy's own fetch.
  const std::string ask =
      "    - id: auth\n"
      "      action: ask\n"
      "      hosts: [auth.example.com]\n";
  EXPECT_NE(problems(policy(kOAuth2, ask))
                .find("ask rule auth matches it, and the proxy's own token fetch cannot wait"),
            std::string::npos);
  // A deny rule beats the allow.
  const std::string denied = std::string(kAuthRule) +
                             "    - id: no-auth\n"
                             "      action: deny\n"
                             "      hosts: [auth.example.com]\n";
  EXPECT_NE(problems(policy(kOAuth2, denied)).find("denied_by_rule"), std::string::npos);
}

TEST(InjectTokens, PlainHttpTokenEndpointNeedsAllowPlaintextCredentials) {
  const std::string http_grant =
      "        oauth2:\n"
      "          token_url: http://auth.example.com/oauth/token\n"
      "          client_id: id\n"
      "          client_secret: ${secret:cs}\n";
  const std::string http_auth =
      "    - id: auth\n"
      "      action: allow\n"
      "      hosts: [auth.example.com]\n"
      "      ports: [80]\n";
  EXPECT_EQ(problems(policy(http_grant, http_auth)),
            "p.yaml:12:22: token endpoint http://auth.example.com/oauth/token of rule 'api' is "
            "plain http://: the grant would send its credentials in clear; use https:// or set "
            "allow_plaintext_credentials: true\n");
  EXPECT_EQ(problems(policy(http_grant + "      allow_plaintext_credentials: true\n", http_auth)),
            "<loaded>");
}

TEST(InjectTokens, GoogleServiceAccountLoads) {
  const std::string sa =
      "        google_service_account:\n"
      "          key: ${secret:gcp_sa}\n"
      "          scopes: [https://www.googleapis.com/auth/cloud-platform]\n";
  const std::string google_rule =
      "    - id: google-token\n"
      "      action: allow\n"
      "      hosts: [oauth2.googleapis.com]\n";
  auto w = parseWorkflow(policy(sa, google_rule), "p.yaml");
  ASSERT_TRUE(w) << w.error().str();
  const auto& g = w->rules[0].inject.google_service_account;
  ASSERT_TRUE(g);
  EXPECT_EQ(g->key, "${secret:gcp_sa}");
  EXPECT_EQ(g->scopes, std::vector<std::string>{"https://www.googleapis.com/auth/cloud-platform"});
  EXPECT_EQ(g->token_url, "https://oauth2.googleapis.com/token");
  EXPECT_EQ(w->rules[0].inject.secret_names, std::vector<std::string>{"gcp_sa"});
  // Google's token endpoint is checked like any other.
  EXPECT_NE(problems(policy(sa))
                .find("token endpoint https://oauth2.googleapis.com/token of rule "
                      "'api' (inject.google_service_account) is not allowed"),
            std::string::npos);
}

TEST(InjectTokens, GoogleServiceAccountMistakes) {
  EXPECT_EQ(problems(policy("        google_service_account:\n"
                            "          key: \"prefix ${secret:sa}\"\n"
                            "          scopes: []\n",
                            kAuthRule)),
            "p.yaml:12:16: inject.google_service_account.key must be exactly one "
            "${secret:NAME} (a secret holding the service account's JSON key file)\n"
            "p.yaml:13:19: inject.google_service_account.scopes must be a non-empty list of "
            "scopes\n");
  EXPECT_EQ(problems(policy("        google_service_account:\n"
                            "          scopes: [\"a b\"]\n"
                            "          token_url: https://auth.example.com/oauth/token\n",
                            kAuthRule)),
            "p.yaml:12:11: inject.google_service_account needs 'key'\n"
            "p.yaml:12:20: a scope must not contain spaces (list each scope on its own)\n");
}

TEST(InjectTokens, TokensOnPlainHttpNeedAllowPlaintextCredentials) {
  // A minting rule's plain http:// requests carry the token: refused like inject.headers.
  auto w = parseWorkflow(std::string("apiVersion: sluice/v1\n"
                                     "kind: Workflow\n"
                                     "name: wf\n"
                                     "egress:\n"
                                     "  rules:\n"
                                     "    - id: api\n"
                                     "      action: allow\n"
                                     "      hosts: [api.example.com]\n"
                                     "      ports: [80]\n"
                                     "      inject:\n") +
                             std::string(kOAuth2) + std::string(kAuthRule),
                         "p.yaml");
  ASSERT_TRUE(w) << w.error().str();
  auto m = Matcher::compile(std::make_shared<const Workflow>(std::move(*w)));
  Target t{"api.example.com", std::nullopt, 80};
  auto req = canonicalRequest("GET", "/x");
  ASSERT_TRUE(req);
  auto d = m->decide({t, Visibility::kPlainHttp, &*req, nullptr, true});
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, Reason::kPlaintextCredentials);
}

TEST(InjectTokens, MintingOnPassthroughTlsIsRefused) {
  EXPECT_NE(problems(std::string("apiVersion: sluice/v1\n"
                                 "kind: Workflow\n"
                                 "name: wf\n"
                                 "egress:\n"
                                 "  rules:\n"
                                 "    - id: api\n"
                                 "      action: allow\n"
                                 "      hosts: [api.example.com]\n"
                                 "      ports: [443]\n"
                                 "      inject:\n") +
                     std::string(kOAuth2) + std::string(kAuthRule))
                .find("'inject' on rule 'api' cannot be enforced"),
            std::string::npos);
}

}  // namespace
}  // namespace sluice::policy
