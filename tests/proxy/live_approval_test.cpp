// Held approvals across a live policy update (Proxy::replacePolicy) and a standalone reload
// (Proxy::replaceMatcher): at the swap what the new policy refuses outright is answered deny and
// what it allows outright is released as allowed; an approver's later grant is applied to the
// policy in force when it comes, not the one the connection arrived under.
#include <gtest/gtest.h>

#include "approval_fixture.hpp"

namespace sluice::proxy::testing {
namespace {

// askPolicy() with each `from` replaced by its `to`.
std::shared_ptr<const policy::Matcher> edited(
    const std::vector<std::pair<std::string, std::string>>& edits) {
  auto yaml = askPolicy();
  for (const auto& [from, to] : edits) {
    const auto at = yaml.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) yaml.replace(at, from.size(), to);
  }
  return compileWorkflow(yaml);
}

// Neither rule covers other.test any more.
std::shared_ptr<const policy::Matcher> withoutOther() {
  return edited({{"[other.test, \"*.ask.test\"]", "[\"*.ask.test\"]"},
                 {"[upstream.test, other.test]", "[upstream.test]"}});
}

using LiveApprovalTest = ApprovalTest;

// A live update answers deny the held approvals the new policy refuses outright; what it still
// asks for stays pending for an approver.
TEST_F(LiveApprovalTest, ALiveUpdateDeniesTheHeldApprovalsItRefuses) {
  auto refused = hold(port_, echo());
  auto still = hold(port_, "x.ask.test:443");
  auto g = proxy_->replacePolicy(execution_id_, withoutOther());
  ASSERT_TRUE(g) << g.error().message;
  auto r = refused.client->readResponse();
  EXPECT_EQ(r.status, 403);
  EXPECT_EQ(r.header("x-sluice-reason"), "approval_denied");
  EXPECT_NE(r.body.find("policy generation 2"), std::string::npos) << r.body;
  EXPECT_EQ(up_.echoLog().accepted.load(), 0);
  EXPECT_EQ(pendingIds(), std::vector<std::string>{still.approval.id});
}

// The new policy allows outright what waited (no ask rule covers it now): it goes through at the
// swap, its approval row decided by the new generation, the tunnel's row stamped with it.
TEST_F(LiveApprovalTest, ALiveUpdateReleasesTheHeldApprovalsItAllows) {
  auto held = hold(port_, echo());
  auto still = hold(port_, "x.ask.test:443");
  auto g = proxy_->replacePolicy(execution_id_,
                                 edited({{"[other.test, \"*.ask.test\"]", "[\"*.ask.test\"]"}}));
  ASSERT_TRUE(g) << g.error().message;
  ASSERT_EQ(held.client->readResponse(true).status, 200);
  ASSERT_TRUE(held.client->send("abc"));
  EXPECT_EQ(held.client->readN(3), "abc");
  EXPECT_EQ(pendingIds(), std::vector<std::string>{still.approval.id});
  auto row = rowOf(approvalRows(1), held.approval.id);
  ASSERT_TRUE(row);
  EXPECT_EQ(row->decision, audit::Decision::kAllow);
  EXPECT_EQ(row->decided_by, "policy generation 2");
  held.client.reset();
  auto tunnel = sink_->waitConnection([](const audit::ConnectionEvent& e) {
    return e.host == "other.test" && e.decision == audit::Decision::kAllow;
  });
  ASSERT_TRUE(tunnel);
  EXPECT_EQ(tunnel->stamp.policy_generation, 2u);
  EXPECT_EQ(tunnel->rule_id, "local-upstream");
}

// A GET with a body, held by an ask rule that allows such bodies. The update still asks for it
// (so the approval waits) but no longer allows a body on a GET: the approver's later "yes" meets
// generation 2, which refuses the request, and it never reaches the upstream.
class GetBodyApprovalTest : public ApprovalTest {
 protected:
  std::string policyYaml() override {
    auto yaml = askPolicy();
    const std::string at = "      ask: {timeout: 5s}\n";
    return yaml.replace(yaml.find(at), at.size(), at + "      allow_get_body: true\n");
  }
};

TEST_F(GetBodyApprovalTest, AGrantAfterAnUpdateIsDecidedByThePolicyInForce) {
  Client c(port_);
  const std::string other = "other.test:" + std::to_string(up_.httpPort());
  ASSERT_TRUE(c.send("GET http://" + other + "/held HTTP/1.1\r\nHost: " + other +
                     "\r\nContent-Length: 3\r\n\r\nabc"));
  auto a = nextRaised();
  ASSERT_TRUE(a);
  auto g = proxy_->replacePolicy(execution_id_, compileWorkflow(askPolicy()));
  ASSERT_TRUE(g) << g.error().message;
  EXPECT_EQ(pendingIds(), std::vector<std::string>{a->id});  // generation 2 still asks
  ASSERT_EQ(approvals_->answer(a->id, true, Scope::kOnce, "tester"), AnswerStatus::kAnswered);
  auto r = c.readResponse();
  EXPECT_EQ(r.status, 403);
  EXPECT_EQ(r.header("x-sluice-reason"), "policy_changed");
  EXPECT_NE(r.body.find("policy generation 2 refuses what an approver let through"),
            std::string::npos)
      << r.body;
  EXPECT_NE(r.body.find("body_not_allowed"), std::string::npos) << r.body;
  EXPECT_EQ(up_.httpLog().accepted.load(), 0);
  auto row = sink_->waitRequest([](const audit::RequestEvent& e) { return e.path == "/held"; });
  ASSERT_TRUE(row);
  EXPECT_EQ(row->reason, "policy_changed");
  EXPECT_EQ(row->stamp.policy_generation, 2u);
}

// Still asked for, by a rule that no longer lets it reach a private address: the grant applies
// to that rule, and its address check (the SSRF guard) refuses 127.0.0.1.
TEST_F(LiveApprovalTest, AGrantAfterAnUpdateIsVettedByTheNewRule) {
  auto held = hold(port_, echo());
  auto g = proxy_->replacePolicy(
      execution_id_, edited({{"      allow_private: true\n      cidrs: [\"127.0.0.0/8\"]\n", ""},
                             {"[upstream.test, other.test]", "[upstream.test]"}}));
  ASSERT_TRUE(g) << g.error().message;
  ASSERT_EQ(approvals_->answer(held.approval.id, true, Scope::kOnce, "tester"),
            AnswerStatus::kAnswered);
  auto r = held.client->readResponse();
  EXPECT_EQ(r.status, 403);
  EXPECT_EQ(r.header("x-sluice-reason"), "private_address");
  EXPECT_EQ(up_.echoLog().accepted.load(), 0);
  auto row = sink_->waitConnection([](const audit::ConnectionEvent& e) {
    return e.host == "other.test" && e.decision == audit::Decision::kDeny;
  });
  ASSERT_TRUE(row);
  EXPECT_EQ(row->stamp.policy_generation, 2u);
}

// A standalone listener (no execution, `sluice proxy`): a SIGHUP reload re-decides its held
// approvals by the same code as a live update.
class StandaloneApprovalTest : public ApprovalTest {
 protected:
  StandaloneApprovalTest() { execution_id_.clear(); }
};

TEST_F(StandaloneApprovalTest, AReloadDeniesTheHeldApprovalsItRefuses) {
  auto refused = hold(port_, echo());
  auto still = hold(port_, "x.ask.test:443");
  proxy_->replaceMatcher("asking", withoutOther());
  auto r = refused.client->readResponse();
  EXPECT_EQ(r.status, 403);
  EXPECT_EQ(r.header("x-sluice-reason"), "approval_denied");
  EXPECT_NE(r.body.find("policy generation 2"), std::string::npos) << r.body;
  EXPECT_EQ(up_.echoLog().accepted.load(), 0);
  EXPECT_EQ(pendingIds(), std::vector<std::string>{still.approval.id});
}

}  // namespace
}  // namespace sluice::proxy::testing
