// Learn mode (policy::Query::learn): what no rule explicitly refuses is allowed with
// Decision::learned set and the denial's reason, rule and detail kept (the nearest miss); deny
// rules, the address guard, asks and refused forms are untouched.
#include <gtest/gtest.h>

#include "sluice/policy/loader.hpp"
#include "sluice/policy/request.hpp"
#include "sluice/policy/tunnel.hpp"

namespace sluice::policy {
namespace {

std::shared_ptr<const Matcher> compileRules(const std::string& rules) {
  auto w = parseWorkflow(
      "apiVersion: sluice/v1\nkind: Workflow\nname: wf\negress:\n  rules:\n" + rules, "p.yaml");
  EXPECT_TRUE(w) << (w ? "" : w.error().str());
  if (!w) return nullptr;
  return Matcher::compile(std::make_shared<const Workflow>(std::move(*w)));
}

constexpr const char* kRules =
    "    - {id: items, action: allow, hosts: [api.test], ports: [8080], methods: [GET],\n"
    "       paths: [\"/v1/items/*\"], cidrs: [\"127.0.0.0/8\"], allow_private: true}\n"
    "    - {id: no-admin, action: deny, hosts: [api.test], ports: [8080], paths: [\"/admin\"]}\n"
    "    - {id: bad, action: deny, hosts: [bad.test]}\n"
    "    - {id: asks, action: ask, hosts: [ask.test], ports: [443]}\n";

Decision request(const Matcher& m, const std::string& method, const std::string& path,
                 const IpAddress* at, bool learn, const std::string& host = "api.test") {
  const Target t = makeTarget(host, 8080).value();
  const HttpRequest req = canonicalRequest(method, path).value();
  Query q{t, Visibility::kPlainHttp, &req, at};
  q.learn = learn;
  return m.decide(q);
}

TEST(LearnMode, APathNoRuleAllowsGoesThroughWithItsNearestMiss) {
  auto m = compileRules(kRules);
  const Decision enforced = request(*m, "POST", "/v1/orders", nullptr, false);
  ASSERT_FALSE(enforced.allowed);
  const Decision d = request(*m, "POST", "/v1/orders", nullptr, true);
  EXPECT_TRUE(d.allowed);
  EXPECT_TRUE(d.learned);
  EXPECT_EQ(d.reason, enforced.reason);
  EXPECT_EQ(d.rule_id, "items");
  EXPECT_EQ(d.detail, enforced.detail);
  EXPECT_FALSE(d.nearest_miss.empty());
}

TEST(LearnMode, WhatARuleAllowsIsNotMarkedLearned) {
  auto m = compileRules(kRules);
  const Decision d = request(*m, "GET", "/v1/items/7", nullptr, true);
  EXPECT_TRUE(d.allowed);
  EXPECT_FALSE(d.learned);
}

TEST(LearnMode, ExplicitDenyRulesStillDeny) {
  auto m = compileRules(kRules);
  const Decision admin = request(*m, "GET", "/admin", nullptr, true);
  EXPECT_FALSE(admin.allowed);
  EXPECT_EQ(admin.reason, Reason::kDeniedByRule);
  EXPECT_EQ(admin.rule_id, "no-admin");
  const Target bad_target = makeTarget("bad.test", 443).value();
  Query q{bad_target, Visibility::kTunnel};
  q.learn = true;
  const Decision bad = m->decide(q);
  EXPECT_FALSE(bad.allowed);
  EXPECT_EQ(bad.rule_id, "bad");
}

TEST(LearnMode, AnAskRuleStillAsks) {
  auto m = compileRules(kRules);
  const Target t = makeTarget("ask.test", 443).value();
  Query q{t, Visibility::kTunnel};
  q.learn = true;
  const Decision d = m->decide(q);
  EXPECT_TRUE(d.ask);
  EXPECT_FALSE(d.allowed);
  EXPECT_FALSE(d.learned);
}

TEST(LearnMode, TheAddressGuardStillRefusesNonGlobalAddresses) {
  auto m = compileRules(kRules);
  const IpAddress loopback = parseIpLiteral("127.0.0.1").value();
  const IpAddress private10 = parseIpLiteral("10.1.2.3").value();
  const IpAddress global = parseIpLiteral("93.184.216.34").value();
  // The nearest rule allows private addresses in 127.0.0.0/8: learned there.
  const Decision at_loopback = request(*m, "POST", "/v1/orders", &loopback, true);
  EXPECT_TRUE(at_loopback.allowed);
  EXPECT_TRUE(at_loopback.learned);
  // Not in its cidrs: refused as private.
  const Decision at_10 = request(*m, "POST", "/v1/orders", &private10, true);
  EXPECT_FALSE(at_10.allowed);
  EXPECT_EQ(at_10.reason, Reason::kPrivateAddress);
  // No rule names the host at all: a private address is refused, a global one learned.
  const Decision other = request(*m, "GET", "/", &loopback, true, "other.test");
  EXPECT_FALSE(other.allowed);
  EXPECT_EQ(other.reason, Reason::kPrivateAddress);
  const Decision other_global = request(*m, "GET", "/", &global, true, "other.test");
  EXPECT_TRUE(other_global.allowed);
  EXPECT_TRUE(other_global.learned);
  EXPECT_EQ(other_global.reason, Reason::kNoMatchingRule);
}

TEST(LearnMode, ATunnelNoRuleNamesIsLearnedByDecideTunnel) {
  auto m = compileRules(kRules);
  const Target t = makeTarget("unknown.test", 443).value();
  EXPECT_FALSE(decideTunnel(*m, t).decision.allowed);
  const auto learned = decideTunnel(*m, t, true);
  EXPECT_TRUE(learned.decision.allowed);
  EXPECT_TRUE(learned.decision.learned);
  EXPECT_EQ(learned.decision.reason, Reason::kNoMatchingRule);
}

// The edges of what learn mode lets through: the DNS answer (nameAnswer) for a name no rule
// names but not for one a deny rule names; an address a deny rule's cidrs hold; an IP literal,
// a form only rules with cidrs may allow.
TEST(LearnMode, DenyRulesNamesAndAddressesAndIpLiteralsStayRefused) {
  auto m = compileRules(
      std::string(kRules) +
      "    - {id: no-net, action: deny, ports: [8080], cidrs: [\"93.184.216.0/24\"]}\n");
  EXPECT_FALSE(m->nameAnswer("unknown.test").may_be_allowed);
  const auto learned = m->nameAnswer("unknown.test", true);
  EXPECT_TRUE(learned.may_be_allowed);
  EXPECT_TRUE(learned.learned);
  const auto bad = m->nameAnswer("bad.test", true);
  EXPECT_FALSE(bad.may_be_allowed);
  EXPECT_FALSE(bad.learned);
  ASSERT_NE(bad.rule, nullptr);
  EXPECT_EQ(bad.rule->id, "bad");

  const IpAddress denied = parseIpLiteral("93.184.216.34").value();
  const Decision at_denied = request(*m, "GET", "/", &denied, true, "other.test");
  EXPECT_FALSE(at_denied.allowed);
  EXPECT_FALSE(at_denied.learned);
  EXPECT_EQ(at_denied.reason, Reason::kDeniedByRule) << at_denied.detail;
  EXPECT_EQ(at_denied.rule_id, "no-net");

  const Decision literal = request(*m, "GET", "/", nullptr, true, "198.51.100.7");
  EXPECT_FALSE(literal.allowed);
  EXPECT_FALSE(literal.learned);
  EXPECT_EQ(literal.reason, Reason::kIpLiteralNeedsCidrs) << reasonName(literal.reason);
}

}  // namespace
}  // namespace sluice::policy
