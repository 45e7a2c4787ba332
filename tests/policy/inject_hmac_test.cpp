// `inject.hmac`: what loads, and every validation message with its FILE:LINE:COL.
#include <gtest/gtest.h>

#include "sluice/policy/loader.hpp"
#include "sluice/policy/matcher.hpp"

namespace sluice::policy {
namespace {

// A rule (ports 443, tls: inspect) with `hmac` lines under `inject:` (each indented 8).
std::string withHmac(std::string_view hmac_lines, std::string_view extra_inject = "") {
  return std::string(
             "apiVersion: sluice/v1\nkind: Workflow\nname: wf\negress:\n  rules:\n"
             "    - id: hooks\n      action: allow\n      hosts: [hooks.example]\n"
             "      ports: [443]\n      tls: inspect\n      inject:\n") +
         std::string(extra_inject) + "        hmac:\n" + std::string(hmac_lines);
}

std::string problems(const std::string& yaml) {
  auto w = parseWorkflow(yaml, "p.yaml");
  if (w) return "<loaded>";
  std::string s = w.error().str();
  if (s.ends_with('\n')) s.pop_back();
  return s;
}

TEST(InjectHmac, LoadsTheGithubWebhookScheme) {
  auto w = parseWorkflow(withHmac("          key: ${secret:hook_key}\n"
                                  "          header: X-Hub-Signature-256\n"
                                  "          prefix: \"sha256=\"\n"
                                  "          message: \"${body}\"\n"),
                         "p.yaml");
  ASSERT_TRUE(w) << w.error().str();
  const auto& h = w->rules[0].inject.hmac;
  ASSERT_TRUE(h);
  EXPECT_EQ(h->key_secret, "hook_key");
  EXPECT_EQ(h->algorithm, HmacSigning::Algorithm::kSha256);
  EXPECT_EQ(h->encoding, HmacSigning::Encoding::kHex);
  EXPECT_EQ(h->header, "X-Hub-Signature-256");
  EXPECT_EQ(h->prefix, "sha256=");
  EXPECT_EQ(h->message, "${body}");
  EXPECT_TRUE(h->timestamp_header.empty());
  EXPECT_TRUE(h->needs_body);
  EXPECT_EQ(w->rules[0].inject.secret_names, std::vector<std::string>{"hook_key"});
  EXPECT_EQ(w->secretNames(), std::vector<std::string>{"hook_key"});
  EXPECT_FALSE(w->rules[0].inject.empty());
}

TEST(InjectHmac, LoadsATimestampedSha512Base64SchemeBesideHeaders) {
  auto w = parseWorkflow(withHmac("          key: ${secret:sign_key}\n"
                                  "          algorithm: sha512\n"
                                  "          encoding: base64\n"
                                  "          header: X-Signature\n"
                                  "          timestamp_header: X-Timestamp\n"
                                  "          message: \"${method}\\n${path}\\n${query}\\n"
                                  "${timestamp}\"\n",
                                  "        headers: {X-Key-Id: \"${secret:key_id}\"}\n"),
                         "p.yaml");
  ASSERT_TRUE(w) << w.error().str();
  const auto& h = *w->rules[0].inject.hmac;
  EXPECT_EQ(h.algorithm, HmacSigning::Algorithm::kSha512);
  EXPECT_EQ(h.encoding, HmacSigning::Encoding::kBase64);
  EXPECT_EQ(h.timestamp_header, "X-Timestamp");
  EXPECT_EQ(h.message, "${method}\n${path}\n${query}\n${timestamp}");
  EXPECT_FALSE(h.needs_body);
  EXPECT_EQ(w->rules[0].inject.secret_names, (std::vector<std::string>{"key_id", "sign_key"}));
}

TEST(InjectHmac, RefusesWhatCannotWorkWithItsPosition) {
  const std::string key = "          key: ${secret:k}\n";
  const std::string header = "          header: X-Signature\n";
  const std::string body = "          message: \"${body}\"\n";
  EXPECT_EQ(problems(withHmac("          key: literal-key\n" + header + body)),
            "p.yaml:13:16: inject.hmac.key must be exactly '${secret:NAME}' (the key never goes "
            "in the policy)");
  EXPECT_EQ(problems(withHmac(key + "          algorithm: md5\n" + header + body)),
            "p.yaml:14:22: inject.hmac.algorithm must be sha256 or sha512, not 'md5'");
  EXPECT_EQ(problems(withHmac(key + "          encoding: base32\n" + header + body)),
            "p.yaml:14:21: inject.hmac.encoding must be hex or base64, not 'base32'");
  EXPECT_EQ(problems(withHmac(key + "          header: Content-Length\n" + body)),
            "p.yaml:14:19: inject.hmac.header 'Content-Length' cannot be set (framing or "
            "hop-by-hop)");
  EXPECT_EQ(problems(withHmac(key + header + "          message: \"${nonce}\"\n")),
            "p.yaml:15:20: inject.hmac.message: unknown variable '${nonce}' (known: ${method} "
            "${path} ${query} ${timestamp} ${body_sha256} ${body})");
  EXPECT_EQ(problems(withHmac(key + header + "          message: \"${timestamp}.${body}\"\n")),
            "p.yaml:15:20: inject.hmac.message names ${timestamp}: add 'timestamp_header' (the "
            "header that tells the upstream which time was signed)");
  EXPECT_EQ(problems(withHmac(key + body)),
            "p.yaml:13:11: inject.hmac needs 'header' (the header to set)");
  EXPECT_EQ(problems(withHmac(key + header + body + "          salt: x\n")),
            "p.yaml:16:11: unknown key 'salt' in inject.hmac (expected one of: key algorithm "
            "header encoding message prefix timestamp_header)");
}

TEST(InjectHmac, NeedsInspectionOnPort443AndRefusesPlainHttpWithoutConsent) {
  std::string yaml = withHmac(
      "          key: ${secret:k}\n          header: X-Sig\n          message: \"${body}\"\n");
  std::string passthrough = yaml;
  passthrough.replace(passthrough.find("      tls: inspect\n"), 19, "");
  EXPECT_NE(problems(passthrough).find("'inject' on rule 'hooks' cannot be enforced"),
            std::string::npos)
      << problems(passthrough);
  std::string plain = yaml;
  plain.replace(plain.find("ports: [443]"), 12, "ports: [80]");
  auto w = parseWorkflow(plain, "p.yaml");
  ASSERT_TRUE(w) << w.error().str();
  auto m = Matcher::compile(std::make_shared<const Workflow>(std::move(*w)));
  auto req = canonicalRequest("POST", "/hook");
  ASSERT_TRUE(req);
  auto target = parseAuthority("hooks.example:80");
  ASSERT_TRUE(target);
  Query q{*target, Visibility::kPlainHttp, &*req, nullptr, true};
  auto d = m->decide(q);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, Reason::kPlaintextCredentials);
}

}  // namespace
}  // namespace sluice::policy
