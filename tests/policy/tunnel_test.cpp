// policy::decideTunnel: the connection phase of a CONNECT or redirected connection, as the
// proxy's admission decides it and `policy replay` decides recorded tunnels again.
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

}  // namespace
}  // namespace sluice::policy
