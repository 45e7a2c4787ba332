// `--approve-with CMD` in-process (serve/include/sluice/serve/approve_with.hpp): the answer line,
// what counts as a deny, and a command that answers but leaves a child holding its stdout.
#include "sluice/serve/approve_with.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>

#include "sluice/proxy/approvals.hpp"

namespace sluice::serve {
namespace {

using namespace std::chrono_literals;

TEST(ApproverAnswer, FirstLineAllowOrDenyWithAnOptionalScope) {
  EXPECT_TRUE(parseApproverAnswer("allow\n").allow);
  EXPECT_TRUE(parseApproverAnswer("allow execution\nignored").whole_execution);
  EXPECT_TRUE(parseApproverAnswer("deny\n").valid);
  EXPECT_FALSE(parseApproverAnswer("deny\n").allow);
  EXPECT_FALSE(parseApproverAnswer("yes\n").valid);
  EXPECT_FALSE(parseApproverAnswer("allow everything\n").valid);
  EXPECT_FALSE(parseApproverAnswer("allow execution now\n").valid);
  EXPECT_FALSE(parseApproverAnswer("").valid);
}

// Raises one approval on `desk` and waits for its outcome.
proxy::ApprovalOutcome decide(proxy::ApprovalDesk& desk, std::chrono::milliseconds timeout) {
  std::mutex mu;
  std::condition_variable cv;
  std::optional<proxy::ApprovalOutcome> got;
  proxy::Approval a;
  a.execution_id = "ex-test";
  a.workflow = "w";
  a.rule = "gate";
  a.host = "api.example";
  a.port = 443;
  desk.ask(a, timeout, [&](proxy::ApprovalOutcome o) {
    std::lock_guard lock(mu);
    got = std::move(o);
    cv.notify_all();
  });
  std::unique_lock lock(mu);
  cv.wait_for(lock, timeout + 5s, [&] { return got.has_value(); });
  return got.value_or(proxy::ApprovalOutcome{false, "no outcome", ""});
}

TEST(ApproveWith, TheCommandsAnswerDecides) {
  auto desk = std::make_shared<proxy::ApprovalDesk>(nullptr);
  {
    ApproveWith approver(desk, "grep -q api.example && echo allow", "");
    auto o = decide(*desk, 10s);
    EXPECT_TRUE(o.allowed) << o.reason;
    EXPECT_EQ(o.decided_by, "approve-with");
  }
  {
    ApproveWith approver(desk, "echo maybe", "");
    EXPECT_FALSE(decide(*desk, 10s).allowed);
  }
  {
    ApproveWith approver(desk, "echo allow; exit 3", "");  // failed: a deny
    EXPECT_FALSE(decide(*desk, 10s).allowed);
  }
}

// A command that answers and leaves a background child holding its stdout is decided by its
// answer as soon as it exits, not at the approval's timeout; the child is killed.
TEST(ApproveWith, AnAnswerIsNotHeldUpByAChildKeepingStdoutOpen) {
  auto desk = std::make_shared<proxy::ApprovalDesk>(nullptr);
  ApproveWith approver(desk, "echo allow; sleep 30 &", "");
  const auto t0 = std::chrono::steady_clock::now();
  auto o = decide(*desk, 20s);
  EXPECT_TRUE(o.allowed) << o.reason;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 15s) << "waited for the child's stdout";
}

TEST(ApproveWith, ACommandThatNeverAnswersIsADenyAtTheTimeout) {
  auto desk = std::make_shared<proxy::ApprovalDesk>(nullptr);
  ApproveWith approver(desk, "sleep 30", "");
  auto o = decide(*desk, 500ms);
  EXPECT_FALSE(o.allowed);
}

}  // namespace
}  // namespace sluice::serve
