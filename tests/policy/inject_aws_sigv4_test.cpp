// `inject.aws_sigv4`: parsing, validation messages with FILE:LINE:COL, the checks across rules,
// what `policy explain` lists, and plain http:// refused like any injecting rule.
#include <gtest/gtest.h>

#include "sluice/policy/explain.hpp"
#include "sluice/policy/loader.hpp"
#include "sluice/policy/matcher.hpp"

namespace sluice::policy {
namespace {

constexpr std::string_view kHead =
    "apiVersion: sluice/v1\nkind: Workflow\nname: wf\negress:\n  rules:\n"
    "    - id: s3\n      action: allow\n      hosts: [s3.example]\n      tls: inspect\n"
    "      inject:\n        aws_sigv4:\n";

std::string sigv4(std::string_view body) { return std::string(kHead) + std::string(body); }

std::string problems(std::string_view yaml) {
  auto w = parseWorkflow(yaml, "p.yaml");
  return w ? "<loaded>" : w.error().str();
}

constexpr std::string_view kKeys =
    "          access_key_id: ${secret:aws_id}\n"
    "          secret_access_key: \"${secret:aws_key}\"\n";

TEST(InjectAwsSigv4, ParsesTheSecretNames) {
  auto w = parseWorkflow(sigv4(std::string(kKeys) + "          session_token: ${secret:aws_st}\n"),
                         "p.yaml");
  ASSERT_TRUE(w) << w.error().str();
  const auto& a = w->rules[0].inject.aws_sigv4;
  ASSERT_TRUE(a);
  EXPECT_EQ(a->access_key_id, "aws_id");
  EXPECT_EQ(a->secret_access_key, "aws_key");
  EXPECT_EQ(a->session_token, "aws_st");
  EXPECT_EQ(w->rules[0].inject.secret_names,
            (std::vector<std::string>{"aws_id", "aws_key", "aws_st"}));
  EXPECT_EQ(w->secretNames(), (std::vector<std::string>{"aws_id", "aws_key", "aws_st"}));
  EXPECT_FALSE(w->rules[0].inject.empty());
  auto no_token = parseWorkflow(sigv4(kKeys), "p.yaml");
  ASSERT_TRUE(no_token) << no_token.error().str();
  EXPECT_EQ(no_token->rules[0].inject.aws_sigv4->session_token, "");
}

TEST(InjectAwsSigv4, ValidationMessages) {
  EXPECT_EQ(problems(sigv4("          access_key_id: ${secret:aws_id}\n")),
            "p.yaml:12:11: inject.aws_sigv4 needs 'secret_access_key'\n");
  EXPECT_EQ(problems(sigv4(std::string(kKeys) + "          sesion_token: ${secret:t}\n")),
            "p.yaml:14:11: unknown key 'sesion_token' in inject.aws_sigv4 (did you mean "
            "'session_token'?)\n");
  EXPECT_EQ(problems(sigv4("          access_key_id: AKIAREAL\n"
                           "          secret_access_key: ${secret:k}\n")),
            "p.yaml:12:26: inject.aws_sigv4.access_key_id must be exactly one ${secret:NAME} "
            "(got 'AKIAREAL')\n");
  EXPECT_EQ(problems(sigv4("          access_key_id: \"x${secret:a}\"\n"
                           "          secret_access_key: ${secret:k}\n")),
            "p.yaml:12:26: inject.aws_sigv4.access_key_id must be exactly one ${secret:NAME} "
            "(got 'x${secret:a}')\n");
  EXPECT_EQ(problems(sigv4("          access_key_id: [a]\n"
                           "          secret_access_key: ${secret:k}\n")),
            "p.yaml:12:26: inject.aws_sigv4.access_key_id must be a string\n");
  EXPECT_EQ(problems(std::string(kHead).substr(0, kHead.size() - 19) + "        aws_sigv4: x\n"),
            "p.yaml:11:20: inject.aws_sigv4 must be a mapping\n");
}

// Like inject.headers: a rule for port 443 tunnelled through cannot re-sign anything.
TEST(InjectAwsSigv4, NeedsInspectionForHttps) {
  std::string yaml = sigv4(kKeys);
  yaml.replace(yaml.find("tls: inspect"), 12, "ports: [443]");
  EXPECT_EQ(problems(yaml),
            "p.yaml:11:9: 'inject' on rule 's3' cannot be enforced: its traffic (port 443, tls: "
            "passthrough) is encrypted; add 'tls: inspect'\n");
}

TEST(InjectAwsSigv4, OneRulePerWorkflow) {
  std::string second =
      "    - id: sts\n      action: allow\n      hosts: [sts.example]\n      tls: inspect\n"
      "      inject:\n        aws_sigv4:\n" +
      std::string(kKeys);
  EXPECT_EQ(problems(sigv4(kKeys) + second),
            "p.yaml:20:11: rule 'sts': only one rule may have inject.aws_sigv4 (rule 's3' has "
            "it; the sandbox has one AWS_ACCESS_KEY_ID): list every host in that rule\n");
  std::string env =
      "    - id: other\n      action: allow\n      hosts: [o.example]\n      tls: inspect\n"
      "      inject:\n        headers: {X-K: \"${secret:o}\"}\n"
      "        placeholder_env: AWS_SECRET_ACCESS_KEY\n";
  EXPECT_EQ(problems(sigv4(kKeys) + env),
            "p.yaml:14:7: rule 'other': inject.placeholder_env AWS_SECRET_ACCESS_KEY is set by "
            "rule 's3' (inject.aws_sigv4)\n");
  std::string both = std::string(kHead).substr(0, kHead.size() - 19) +
                     "        headers: {X-K: \"${secret:o}\"}\n        placeholder_env: K\n"
                     "        aws_sigv4:\n" +
                     std::string(kKeys);
  EXPECT_EQ(problems(both),
            "p.yaml:14:11: inject.aws_sigv4 cannot be combined with inject.placeholder_env on "
            "one rule (it sets its own placeholders: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)\n");
}

TEST(InjectAwsSigv4, ExplainListsItAndPlainHttpIsRefused) {
  std::string yaml = sigv4(kKeys);
  yaml.replace(yaml.find("tls: inspect"), 12, "ports: [80, 443]\n      tls: inspect");
  auto w = parseWorkflow(yaml, "p.yaml");
  ASSERT_TRUE(w) << w.error().str();
  auto m = Matcher::compile(std::make_shared<const Workflow>(std::move(*w)));
  auto https = explain(*m, {"https://s3.example/bucket/key", "", "PUT", "93.184.216.34"});
  ASSERT_TRUE(https);
  EXPECT_TRUE(https->decision.allowed);
  EXPECT_EQ(https->inject_headers, std::vector<std::string>{"aws_sigv4"});
  EXPECT_EQ(https->inject_secrets, (std::vector<std::string>{"aws_id", "aws_key"}));
  auto plain = explain(*m, {"http://s3.example/bucket/key", "", "GET", "93.184.216.34"});
  ASSERT_TRUE(plain);
  EXPECT_EQ(reasonName(plain->decision.reason), "plaintext_credentials");
}

}  // namespace
}  // namespace sluice::policy
