// Supervising runs: stdin fed through a pipe, a stop fd that stops one run among several, and
// runSandboxed() from many threads of one process at once (what `sluice serve` does).
#include <gtest/gtest.h>
#include <openssl/sha.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/wait.h>

#include <atomic>
#include <set>
#include <thread>

#include "isolation.hpp"
#include "proc_scan.hpp"
#include "sluice/runner/receipt.hpp"
#include "sluice/runner/sandbox.hpp"

using namespace sluice::runner;
using namespace std::chrono_literals;

namespace {

RunSpec shell(const std::string& script, const char* tag = "sup") {
  static std::atomic<int> n{0};
  RunSpec s;
  s.argv = {"/bin/sh", "-c", script};
  s.execution_id =
      std::string("t-") + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(n++);
  s.limits.timeout = 30s;
  return s;
}

std::string hexSha256(const std::string& data) {
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), md);
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned char c : md) out += {kHex[c >> 4], kHex[c & 15]};
  return out;
}

TEST(Stdin, ReachesTheProgramThenEof) {
  REQUIRE_SANDBOX();
  RunSpec s = shell("cat; echo; echo eof");
  s.stdin_data = "line one\nline two";
  auto r = runSandboxed(s);
  ASSERT_TRUE(r) << r.error().where << ": " << r.error().message;
  EXPECT_EQ(r->out.text, "line one\nline two\neof\n");
}

TEST(Stdin, IsDevNullWithoutData) {
  REQUIRE_SANDBOX();
  auto r = runSandboxed(shell("readlink /proc/self/fd/0; cat; echo rc=$?"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->out.text, "/dev/null\nrc=0\n");
}

TEST(Stdin, MoreThanAPipeHoldsArrivesWhole) {
  REQUIRE_SANDBOX();
  std::string data(3 << 20, '\0');
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>('a' + i % 23);
  RunSpec s = shell("sha256sum | cut -d' ' -f1");
  s.stdin_data = data;
  auto r = runSandboxed(s);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->out.text, hexSha256(data) + "\n");
}

TEST(Stdin, AProgramThatNeverReadsItDoesNotHurtTheCaller) {
  REQUIRE_SANDBOX();
  // The pipe's reader goes away with 4 MiB unwritten: EPIPE, never a SIGPIPE that would kill
  // this process (its disposition is the default here).
  struct sigaction old {};
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  ::sigaction(SIGPIPE, &dfl, &old);
  RunSpec s = shell("exec 0<&-; echo closed");
  s.stdin_data = std::string(4 << 20, 'x');
  auto r = runSandboxed(s);
  ::sigaction(SIGPIPE, &old, nullptr);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->out.text, "closed\n");
  EXPECT_EQ(r->exit_code, 0);
}

TEST(StopFd, StopsOneRunWhileAnotherInAnotherThreadCompletes) {
  REQUIRE_SANDBOX();
  const int stop = ::eventfd(0, EFD_CLOEXEC);
  ASSERT_GE(stop, 0);
  sluice::base::Result<RunResult> stopped = std::unexpected(sluice::base::Error{}), other = stopped;
  const auto t0 = std::chrono::steady_clock::now();
  std::thread a([&] {
    RunHooks h;
    h.stop_fd = stop;
    stopped = runSandboxed(shell("echo started; sleep 30", "stopfd-a"), h);
  });
  std::thread b([&] { other = runSandboxed(shell("sleep 1.5; echo done", "stopfd-b")); });
  std::this_thread::sleep_for(500ms);
  const std::uint64_t one = 1;
  ASSERT_EQ(::write(stop, &one, sizeof one), static_cast<ssize_t>(sizeof one));
  a.join();
  const auto stopped_after = std::chrono::steady_clock::now() - t0;
  b.join();
  ::close(stop);
  ASSERT_TRUE(stopped) << stopped.error().where << ": " << stopped.error().message;
  EXPECT_TRUE(stopped->stopped_by_request);
  EXPECT_EQ(stopped->stop_signal, SIGTERM);
  EXPECT_EQ(stopped->sluiceExitStatus(), 128 + SIGTERM);
  EXPECT_EQ(stopped->out.text, "started\n");
  EXPECT_LT(stopped_after, 5s);
  ASSERT_TRUE(other) << other.error().where << ": " << other.error().message;
  EXPECT_FALSE(other->stopped_by_request);
  EXPECT_EQ(other->exit_code, 0);
  EXPECT_EQ(other->out.text, "done\n");
}

TEST(StopFd, ReadableBeforeTheProgramStartsRunsNothing) {
  REQUIRE_SANDBOX();
  const int stop = ::eventfd(1, EFD_CLOEXEC);
  RunHooks h;
  h.stop_fd = stop;
  const std::string marker = "/tmp/sluice-stopfd-" + std::to_string(::getpid());
  auto r = runSandboxed(shell("echo ran"), h);
  ::close(stop);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().where, "stopped");
}

TEST(Concurrent, EightRunsFromEightThreadsAllSucceedWithDistinctReceipts) {
  REQUIRE_SANDBOX();
  constexpr int kRuns = 8;
  std::vector<RunSpec> specs;
  for (int i = 0; i < kRuns; ++i) {
    specs.push_back(shell("echo run-" + std::to_string(i) + "; cat; echo x > /output/mine-" +
                              std::to_string(i) + "; sleep 0.2",
                          "conc"));
    specs.back().stdin_data = "stdin-" + std::to_string(i) + "\n";
    specs.back().files = {{"/work/id", std::to_string(i)}};
  }
  std::vector<sluice::base::Result<RunResult>> results(
      kRuns, std::unexpected(sluice::base::Error{sluice::base::Code::kInternal, "", "not run"}));
  std::vector<std::vector<std::string>> cgroups(kRuns);
  std::vector<std::thread> threads;
  for (int i = 0; i < kRuns; ++i)
    threads.emplace_back([&, i] {
      RunHooks h;
      // While it runs, the run's own cgroup directories exist, named by its execution id.
      h.before_start = [&, i]() -> sluice::base::Result<void> {
        for (const auto& name : sluice::testing::sluiceCgroupNames())
          if (name.ends_with("." + specs[i].execution_id)) cgroups[i].push_back(name);
        return {};
      };
      results[i] = runSandboxed(specs[i], h);
    });
  for (auto& t : threads) t.join();
  std::set<std::string> ids, hashes, cgroup_names;
  for (int i = 0; i < kRuns; ++i) {
    ASSERT_TRUE(results[i]) << i << ": " << results[i].error().where << ": "
                            << results[i].error().message;
    const RunResult& r = *results[i];
    EXPECT_EQ(r.exit_code, 0) << r.err.text;
    EXPECT_EQ(r.out.text, "run-" + std::to_string(i) + "\nstdin-" + std::to_string(i) + "\n");
    ASSERT_EQ(r.artifacts.size(), 1u);
    EXPECT_EQ(r.artifacts[0].path, "mine-" + std::to_string(i));
    EXPECT_FALSE(cgroups[i].empty());
    for (const auto& c : cgroups[i]) cgroup_names.insert(c);
    const auto receipt = buildReceipt(specs[i], r, ReceiptContext{});
    ids.insert(receipt["execution_id"].get<std::string>());
    hashes.insert(receipt.dump());
  }
  EXPECT_EQ(ids.size(), static_cast<std::size_t>(kRuns));
  EXPECT_EQ(hashes.size(), static_cast<std::size_t>(kRuns));
  // One set of directories per run (three hierarchies on cgroup v1, one on v2), none shared.
  EXPECT_EQ(cgroup_names.size() % kRuns, 0u);
  EXPECT_GE(cgroup_names.size(), static_cast<std::size_t>(kRuns));
  for (const auto& name : sluice::testing::sluiceCgroupNames())
    for (const auto& s : specs) EXPECT_FALSE(name.ends_with("." + s.execution_id)) << name;
  int st = 0;
  EXPECT_EQ(::waitpid(-1, &st, WNOHANG), -1) << "a sandbox process was left unreaped";
}

}  // namespace
