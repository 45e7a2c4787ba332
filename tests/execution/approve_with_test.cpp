// `--approve-with CMD` in-process (execution/include/sluice/execution/approve_with.hpp): the answer
// line, what counts as a deny, a command that answers but leaves a child holding its stdout, and
// one whose approval is decided while it runs.
#include "sluice/execution/approve_with.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <optional>
#include <thread>

#include "sluice/proxy/approvals.hpp"

namespace sluice::execution {
namespace {

using namespace std::chrono_literals;

TEST(ApproverAnswer, FirstLineAllowOrDenyWithAnOptionalScope) {
  EXPECT_TRUE(parseApproverAnswer("allow\n").allow);
  EXPECT_EQ(parseApproverAnswer("allow execution\nignored").scope, proxy::Scope::kExecution);
  EXPECT_EQ(parseApproverAnswer("allow host\n").scope, proxy::Scope::kHost);
  EXPECT_EQ(parseApproverAnswer("deny once\n").scope, proxy::Scope::kOnce);
  EXPECT_EQ(parseApproverAnswer("allow\n").scope, proxy::Scope::kOnce);
  EXPECT_TRUE(parseApproverAnswer("deny\n").valid);
  EXPECT_FALSE(parseApproverAnswer("deny\n").allow);
  EXPECT_FALSE(parseApproverAnswer("yes\n").valid);
  EXPECT_FALSE(parseApproverAnswer("allow everything\n").valid);
  EXPECT_FALSE(parseApproverAnswer("allow execution now\n").valid);
  EXPECT_FALSE(parseApproverAnswer("").valid);
}

// An ask of rule "gate" for api.example:443 by execution ex-test.
proxy::Approval gateApproval() {
  proxy::Approval a;
  a.execution_id = "ex-test";
  a.workflow = "w";
  a.rule = "gate";
  a.host = "api.example";
  a.port = 443;
  return a;
}

// Raises one approval on `desk` and waits for its outcome.
proxy::ApprovalOutcome decide(proxy::ApprovalDesk& desk, std::chrono::milliseconds timeout) {
  std::mutex mu;
  std::condition_variable cv;
  std::optional<proxy::ApprovalOutcome> got;
  desk.ask(gateApproval(), timeout, [&](proxy::ApprovalOutcome o) {
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

// An approval decided some other way while its command runs (by an approver, by a `scope:
// execution` answer to another one, withdrawn because its client hung up) no longer waits: the
// command and everything in its group are killed, and nothing answers for it afterwards.
TEST(ApproveWith, ACommandWhoseApprovalIsDecidedMeanwhileIsKilled) {
  const std::string marker =
      ::testing::TempDir() + "approve-with-pid-" + std::to_string(::getpid());
  std::remove(marker.c_str());
  auto desk = std::make_shared<proxy::ApprovalDesk>(nullptr);
  ApproveWith approver(desk, "echo $$ > " + marker + "; sleep 30; echo allow", "");
  std::mutex mu;
  std::condition_variable cv;
  std::optional<proxy::ApprovalOutcome> got;
  const proxy::Approval raised = desk->ask(gateApproval(), 60s, [&](proxy::ApprovalOutcome o) {
    std::lock_guard lock(mu);
    got = std::move(o);
    cv.notify_all();
  });
  pid_t group = 0;
  for (int i = 0; i < 500 && group <= 0; ++i) {
    std::ifstream in(marker);
    in >> group;
    if (group <= 0) std::this_thread::sleep_for(10ms);
  }
  ASSERT_GT(group, 0) << "the command did not start";
  EXPECT_EQ(desk->answer(raised.id, false, proxy::Scope::kOnce, "tester"),
            proxy::AnswerStatus::kAnswered);
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, 5s, [&] { return got.has_value(); }));
  }
  EXPECT_EQ(got->decided_by, "tester");
  bool gone = false;
  for (int i = 0; i < 300 && !gone; ++i) {
    gone = ::kill(-group, 0) != 0 && errno == ESRCH;
    if (!gone) std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(gone) << "the command's group outlived its approval";
  std::remove(marker.c_str());
}

}  // namespace
}  // namespace sluice::execution
