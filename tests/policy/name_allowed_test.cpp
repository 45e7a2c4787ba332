// Matcher::nameMayBeAllowed, the question sluice's DNS asks: could an allow rule match a
// connection to this name on some port? It decides between a synthetic answer and NXDOMAIN.
#include <gtest/gtest.h>

#include "sluice/policy/loader.hpp"
#include "sluice/policy/matcher.hpp"

namespace sluice::policy {
namespace {

std::shared_ptr<const Matcher> compileRules(const std::string& rules) {
  std::string yaml = "apiVersion: sluice/v1\nkind: Workflow\nname: t\negress:\n  rules:\n" + rules;
  auto w = parseWorkflow(yaml, "t.yaml");
  EXPECT_TRUE(w) << (w ? "" : w.error().str());
  if (!w) return nullptr;
  return Matcher::compile(std::make_shared<const Workflow>(std::move(*w)));
}

TEST(NameMayBeAllowed, ExactSuffixAndRegexPatterns) {
  auto m = compileRules(
      "    - {id: a, action: allow, hosts: [pypi.org, \"*.pythonhosted.org\"], ports: [443]}\n"
      "    - {id: b, action: allow, hosts: [\"re:api[0-9]+\\\\.stats\\\\.example\"]}\n");
  ASSERT_TRUE(m);
  EXPECT_TRUE(m->nameMayBeAllowed("pypi.org"));
  EXPECT_TRUE(m->nameMayBeAllowed("PyPI.org."));  // case and the trailing dot of DNS names
  EXPECT_TRUE(m->nameMayBeAllowed("files.pythonhosted.org"));
  EXPECT_TRUE(m->nameMayBeAllowed("a.b.pythonhosted.org"));
  EXPECT_TRUE(m->nameMayBeAllowed("api12.stats.example"));
  for (auto name : {"pythonhosted.org", "evil-pythonhosted.org", "pypi.org.evil.net",
                    "api.stats.example", "x.pypi.org", "", ".", "a..b", "com"}) {
    EXPECT_FALSE(m->nameMayBeAllowed(name)) << name;
  }
}

TEST(NameMayBeAllowed, IpLiteralsNeverMatchHostPatterns) {
  auto m = compileRules(
      "    - {id: net, action: allow, cidrs: [\"10.0.0.0/8\"], allow_private: true}\n"
      "    - {id: any, action: allow, hosts: [\"re:.*\"]}\n");
  ASSERT_TRUE(m);
  EXPECT_TRUE(m->nameMayBeAllowed("example.net"));
  for (auto name : {"10.1.2.3", "127.1", "2130706433", "0x7f.1"})
    EXPECT_FALSE(m->nameMayBeAllowed(name)) << name;
}

TEST(NameMayBeAllowed, DenyOnEveryAllowedPortMakesItFalse) {
  auto m = compileRules(
      "    - {id: all, action: allow, hosts: [\"*.example.com\"], ports: [443, 8000-8100]}\n"
      "    - {id: d1, action: deny, hosts: [secret.example.com], ports: [443, 8000-8049]}\n"
      "    - {id: d2, action: deny, hosts: [secret.example.com], ports: [8050-9000]}\n"
      "    - {id: d3, action: deny, hosts: [half.example.com], ports: [443, 8000-8099]}\n"
      "    - {id: d4, action: deny, hosts: [\"*.gone.example.com\"], ports: [1-65535]}\n");
  ASSERT_TRUE(m);
  EXPECT_FALSE(m->nameMayBeAllowed("secret.example.com"));  // 443 and 8000-8100 all denied
  EXPECT_TRUE(m->nameMayBeAllowed("half.example.com"));     // 8100 is still allowed
  EXPECT_FALSE(m->nameMayBeAllowed("x.gone.example.com"));
  EXPECT_TRUE(m->nameMayBeAllowed("gone.example.com"));
}

TEST(NameMayBeAllowed, ConditionalDenyRulesDoNotHideTheName) {
  // A deny rule with methods (judged per request) or cidrs (judged per address) leaves other
  // connections to the name allowed, so the name must resolve.
  auto m = compileRules(
      "    - {id: a, action: allow, hosts: [up.example.com, db.example.com], tls: inspect}\n"
      "    - {id: d, action: deny, hosts: [up.example.com], methods: [PUT], tls: inspect}\n"
      "    - {id: c, action: deny, hosts: [db.example.com], cidrs: [\"10.0.0.0/8\"]}\n");
  ASSERT_TRUE(m);
  EXPECT_TRUE(m->nameMayBeAllowed("up.example.com"));
  EXPECT_TRUE(m->nameMayBeAllowed("db.example.com"));
}

TEST(NameMayBeAllowed, NoAllowRuleMeansNo) {
  auto m = compileRules("    - {id: d, action: deny, hosts: [\"*.example.com\"]}\n");
  ASSERT_TRUE(m);
  EXPECT_FALSE(m->nameMayBeAllowed("a.example.com"));
  EXPECT_FALSE(m->nameMayBeAllowed("example.org"));
}

// The rule a DNS row names: the allow rule that made the name answerable; else the deny rule
// that covers an allowed port (not an earlier deny that covers only other ports); else any
// deny rule naming it; else none.
TEST(NameMayBeAllowed, TheAnswerNamesTheRuleBehindIt) {
  auto m = compileRules(
      "    - {id: ssh, action: deny, hosts: [\"*.example.com\"], ports: [22]}\n"
      "    - {id: web, action: allow, hosts: [s.example.com, open.example.com], ports: [443]}\n"
      "    - {id: shut, action: deny, hosts: [s.example.com], ports: [443]}\n");
  ASSERT_TRUE(m);
  auto expectAnswer = [&](const char* name, bool may_be_allowed, const char* rule) {
    SCOPED_TRACE(name);
    auto a = m->nameAnswer(name);
    EXPECT_EQ(a.may_be_allowed, may_be_allowed);
    ASSERT_NE(a.rule, nullptr);
    EXPECT_EQ(a.rule->id, rule);
  };
  expectAnswer("open.example.com", true, "web");
  expectAnswer("s.example.com", false, "shut");
  expectAnswer("t.example.com", false, "ssh");
  auto none = m->nameAnswer("example.org");
  EXPECT_FALSE(none.may_be_allowed);
  EXPECT_EQ(none.rule, nullptr);
}

}  // namespace
}  // namespace sluice::policy
