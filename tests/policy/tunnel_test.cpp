// policy::decideTunnel: the connection phase of a CONNECT or redirected connection, as the
// proxy's admission decides it and `policy replay` decides recorded tunnels again; and
// policy::decideTunnelAt, the whole decision at the address (a shadow policy and replay).
#include "sluice/policy/tunnel.hpp"

#include <gtest/gtest.h>

#include "sluice/policy/loader.hpp"

namespace sluice::policy {
namespace {

std::shared_ptr<const Matcher> compileRules(const std::string& rules) {
  auto w = parseWorkflow(
      "apiVersion: sluice/v1\nkind: Workflow\nname: wf\negress:\n  rules:\n" + rules, "p.yaml");
  EXPECT_TRUE(w) << (w ? "" : w.error().str());
  if (!w) return nullptr;
  return Matcher::compile(std::make_shared<const Workflow>(std::move(*w)));
}

TEST(TunnelDecision, AnUnconditionalRuleAllowsTheTunnelForTls) {
  auto m = compileRules("    - {id: a, action: allow, hosts: [api.test], ports: [443]}\n");
  auto t = decideTunnel(*m, makeTarget("api.test", 443).value());
  EXPECT_TRUE(t.decision.allowed);
  EXPECT_EQ(t.decision.rule_id, "a");
  EXPECT_FALSE(t.tls_refused);
  EXPECT_EQ(t.visibility(), Visibility::kTunnel);
}

TEST(TunnelDecision, OnlyRequestRulesAllowPlainHttpInsideAndRefuseTls) {
  auto m = compileRules(
      "    - {id: r, action: allow, hosts: [api.test], ports: [8080], methods: [GET]}\n");
  auto t = decideTunnel(*m, makeTarget("api.test", 8080).value());
  EXPECT_TRUE(t.decision.allowed);
  EXPECT_TRUE(t.decision.request_rules);
  ASSERT_TRUE(t.tls_refused);
  EXPECT_EQ(t.tls_refused->reason, Reason::kInspectionRequired);
  EXPECT_EQ(t.visibility(), Visibility::kPlainHttp);
}

TEST(TunnelDecision, ADenyStaysADenyWithItsReason) {
  auto m = compileRules("    - {id: a, action: allow, hosts: [api.test], ports: [443]}\n");
  auto t = decideTunnel(*m, makeTarget("api.test", 444).value());
  EXPECT_FALSE(t.decision.allowed);
  EXPECT_EQ(t.decision.reason, Reason::kPortNotAllowed);
  EXPECT_FALSE(t.tls_refused);
}

const IpAddress kLoopback = *parseIpLiteral("127.0.0.1");
const IpAddress kPublic = *parseIpLiteral("93.184.216.34");
const IpAddress kPrivate = *parseIpLiteral("10.1.2.3");

// The address phase decides after the connection phase: rule cidrs, the SSRF guard, deny rules
// with cidrs, as the admission vets the address it dials.
TEST(TunnelDecisionAt, TheAddressPhaseAppliesCidrsAndTheSsrfGuard) {
  auto m = compileRules(
      "    - {id: api, action: allow, hosts: [api.test], ports: [443], cidrs: [\"10.0.0.0/8\"],"
      " allow_private: true}\n"
      "    - {id: open, action: allow, hosts: [open.test], ports: [443]}\n"
      "    - {id: no-net, action: deny, cidrs: [\"93.184.216.0/24\"]}\n");
  const Target api = makeTarget("api.test", 443).value();
  const Target open = makeTarget("open.test", 443).value();
  EXPECT_TRUE(decideTunnelAt(*m, api, nullptr).allowed);  // the connection phase alone
  const auto outside = decideTunnelAt(*m, api, &kLoopback);
  EXPECT_FALSE(outside.allowed);
  EXPECT_EQ(outside.reason, Reason::kAddressNotInCidrs);
  EXPECT_EQ(outside.rule_id, "api");
  const auto guarded = decideTunnelAt(*m, open, &kLoopback);
  EXPECT_FALSE(guarded.allowed);
  EXPECT_EQ(guarded.reason, Reason::kPrivateAddress);
  const auto denied = decideTunnelAt(*m, open, &kPublic);
  EXPECT_FALSE(denied.allowed);
  EXPECT_EQ(denied.reason, Reason::kDeniedByRule);
  EXPECT_EQ(denied.rule_id, "no-net");
  const auto inside = decideTunnelAt(*m, api, &kPrivate);
  EXPECT_TRUE(inside.allowed);
  EXPECT_EQ(inside.rule_id, "api");
}

// An ask stays an ask at an address its rule allows, and is refused at one it does not.
TEST(TunnelDecisionAt, AnAskIsVettedForItsRule) {
  auto m = compileRules("    - {id: gate, action: ask, hosts: [api.test], ports: [443]}\n");
  const Target api = makeTarget("api.test", 443).value();
  const auto at_public = decideTunnelAt(*m, api, &kPublic);
  EXPECT_TRUE(at_public.ask);
  EXPECT_EQ(at_public.rule_id, "gate");
  const auto at_loopback = decideTunnelAt(*m, api, &kLoopback);
  EXPECT_FALSE(at_loopback.ask || at_loopback.allowed);
  EXPECT_EQ(at_loopback.reason, Reason::kPrivateAddress);
}

}  // namespace
}  // namespace sluice::policy
