// Prepared sandboxes (prepareSandbox): the plan codec, a run whose namespaces a helper built
// ahead of time, the helper reaped when unused, and the point of preparing early — the
// sandbox's init holds nothing the caller loaded after prepareSandbox().
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <random>
#include <thread>

#include "isolation.hpp"
#include "launch.hpp"
#include "plan_codec.hpp"
#include "proc_scan.hpp"
#include "sluice/runner/sandbox.hpp"

namespace fs = std::filesystem;
using namespace sluice::runner;
using namespace std::chrono_literals;

namespace {

RunSpec shell(const std::string& script, const char* id) {
  RunSpec s;
  s.argv = {"/bin/sh", "-c", script};
  s.execution_id = std::string("t-prepared-") + id + "-" + std::to_string(::getpid());
  s.limits.timeout = 20s;
  s.limits.cpu_time = 10s;
  return s;
}

TEST(PlanCodec, RoundTripsEveryField) {
  static constexpr char kWithNul[] = "127.0.0.1 localhost\n\0binary";  // content is bytes
  detail::ChildPlan in;
  in.mounts.stage = "/run/sluice";
  in.mounts.new_root = "/run/sluice/root";
  in.mounts.scratch = "/run/sluice/scratch";
  in.mounts.ops.push_back({detail::MountOp::Kind::kWriteFile, "/run/sluice/root/etc/hosts", "",
                           std::string(kWithNul, sizeof kWithNul - 1), 0644, 0, "write /etc/hosts",
                           0});
  in.mounts.ops.push_back(
      {detail::MountOp::Kind::kMknod, "/dev/null", "", "", 0666, makedev(1, 3), "mknod", 0x10});
  in.privileges.uid = 1234;
  in.privileges.gid = 4321;
  in.privileges.rlimit_count = 1;
  in.privileges.rlimits[0] = {RLIMIT_NOFILE, rlimit{64, 64}};
  in.seccomp = {{0x20, 0, 0, 4}, {0x15, 1, 2, 0xc000003e}};
  in.argv_storage = {"/bin/sh", "-c", "echo 'a b'", ""};
  in.env_storage = {"PATH=/usr/bin", "HOME=/work"};
  in.path_dirs = {"/usr/bin", "/bin"};
  in.network_proxy = true;
  in.arg_start = reinterpret_cast<char*>(0x7fff0000);
  in.arg_len = 42;
  in.fds = {3, 4, 5, 6, 7, 8, 9};

  detail::ChildPlan out;
  auto r = detail::decodePlan(detail::encodePlan(in), out);
  ASSERT_TRUE(r) << r.error();
  EXPECT_EQ(out.mounts.stage, in.mounts.stage);
  EXPECT_EQ(out.mounts.new_root, in.mounts.new_root);
  EXPECT_EQ(out.mounts.scratch, in.mounts.scratch);
  ASSERT_EQ(out.mounts.ops.size(), 2u);
  EXPECT_EQ(out.mounts.ops[0].content, in.mounts.ops[0].content);
  EXPECT_EQ(out.mounts.ops[0].step, in.mounts.ops[0].step);  // static text travels by address
  EXPECT_EQ(out.mounts.ops[1].kind, detail::MountOp::Kind::kMknod);
  EXPECT_EQ(out.mounts.ops[1].dev, makedev(1, 3));
  EXPECT_EQ(out.mounts.ops[1].mode, 0666u);
  EXPECT_EQ(out.mounts.ops[1].keep_flags, 0x10u);
  EXPECT_EQ(out.privileges.uid, 1234u);
  EXPECT_EQ(out.privileges.rlimits[0].value.rlim_cur, 64u);
  ASSERT_EQ(out.seccomp.size(), 2u);
  EXPECT_EQ(out.seccomp[1].k, 0xc000003eu);
  EXPECT_EQ(out.argv_storage, in.argv_storage);
  ASSERT_EQ(out.argv.size(), 5u);  // NULL-terminated, pointing into its own storage
  EXPECT_STREQ(out.argv[2], "echo 'a b'");
  EXPECT_EQ(out.argv[4], nullptr);
  EXPECT_STREQ(out.envp[1], "HOME=/work");
  EXPECT_EQ(out.path_dirs, in.path_dirs);
  EXPECT_TRUE(out.network_proxy);
  EXPECT_EQ(out.arg_start, in.arg_start);
  EXPECT_EQ(out.arg_len, 42u);
  EXPECT_EQ(out.fds.stderr_write, 9);
}

TEST(PlanCodec, EveryTruncationIsRefused) {
  detail::ChildPlan in;
  in.mounts.ops.push_back({detail::MountOp::Kind::kTmpfs, "/x", "size=1m", "", 0755, 0, "t", 0});
  in.argv_storage = {"true"};
  const std::string bytes = detail::encodePlan(in);
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    detail::ChildPlan out;
    EXPECT_FALSE(detail::decodePlan(std::string_view(bytes).substr(0, n), out)) << n;
  }
  detail::ChildPlan out;
  EXPECT_FALSE(detail::decodePlan(bytes + "x", out));
}

TEST(PreparedSandbox, RunsLikeAnyOtherAndLeavesNothing) {
  REQUIRE_SANDBOX();
  auto prepared = prepareSandbox();  // first: the test process is still single-threaded
  ASSERT_TRUE(prepared) << prepared.error().message;
  ASSERT_TRUE(*prepared);
  auto r =
      runSandboxed(shell("hostname; tr '\\0' ' ' </proc/1/comm; echo $$; id -u; "
                         "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; touch /output/made",
                         "runs"),
                   RunHooks{}, std::move(*prepared));
  ASSERT_TRUE(r) << r.error().where << ": " << r.error().message;
  EXPECT_EQ(r->exit_code, 0) << r->err.text;
  EXPECT_EQ(r->out.text, "sandbox\nsluice-init\n2\n65534\nlo\n") << r->err.text;
  // Helper and init are both reaped: no child of ours is left, not even a zombie.
  int st = 0;
  EXPECT_EQ(::waitpid(-1, &st, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
}

TEST(PreparedSandbox, NothingIsPreparedOnceOtherThreadsRun) {
  // Forking a helper that allocates is only safe from a single-threaded process.
  std::promise<void> release;
  std::thread other([f = release.get_future()]() mutable { f.wait(); });
  auto prepared = prepareSandbox();
  release.set_value();
  other.join();
  ASSERT_TRUE(prepared) << prepared.error().message;
  EXPECT_FALSE(*prepared);
  EXPECT_TRUE(sluice::testing::childrenNamed(::getpid(), "sluice-prepare").empty());
}

TEST(PreparedSandbox, AnUnusedOneIsKilledAndReaped) {
  REQUIRE_SANDBOX();
  auto prepared = prepareSandbox();
  ASSERT_TRUE(prepared) << prepared.error().message;
  auto helpers = sluice::testing::waitForChildrenNamed(::getpid(), "sluice-prepare", 1s);
  EXPECT_EQ(helpers.size(), 1u);
  prepared->reset();
  int st = 0;
  EXPECT_EQ(::waitpid(-1, &st, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
  EXPECT_TRUE(sluice::testing::childrenNamed(::getpid(), "sluice-prepare").empty());
}

TEST(PreparedSandbox, AHelperThatDiedFailsTheRunInsteadOfHangingIt) {
  REQUIRE_SANDBOX();
  auto prepared = prepareSandbox();
  ASSERT_TRUE(prepared) << prepared.error().message;
  ASSERT_TRUE(*prepared);
  // Killed right after the fork, before its unshare (~0.3 ms) can have sent the network
  // namespace sluice waits for before it sends the plan.
  ASSERT_GT((*prepared)->helper, 0);
  ::kill((*prepared)->helper, SIGKILL);
  auto run = std::async(std::launch::async, [p = std::move(*prepared)]() mutable {
    return runSandboxed(shell("true", "dead-helper"), RunHooks{}, std::move(p));
  });
  if (run.wait_for(20s) != std::future_status::ready) {
    ADD_FAILURE() << "the run waited for a dead namespace helper";
    std::_Exit(1);  // the hung thread cannot be joined
  }
  auto r = run.get();
  ASSERT_FALSE(r);
  EXPECT_FALSE(r.error().where.empty()) << r.error().message;
  int st = 0;
  EXPECT_EQ(::waitpid(-1, &st, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
}

TEST(PreparedSandbox, InitHoldsNothingLoadedAfterPreparing) {
  REQUIRE_SANDBOX();
  auto prepared = prepareSandbox();
  ASSERT_TRUE(prepared) << prepared.error().message;
  // Stands for what sluice loads after preparing: secrets, the execution CA's key.
  std::string marker = "loaded-after-prepare-" + std::to_string(std::random_device{}());
  std::string* held = new std::string(marker);  // on the heap, like a parsed secret
  bool init_seen = false, init_holds = true;
  std::size_t init_scanned = 0;
  StartGate gate = [&]() -> sluice::base::Result<void> {
    auto inits = sluice::testing::waitForChildrenNamed(::getpid(), "sluice-init", 2s);
    init_seen = inits.size() == 1;
    if (init_seen) {
      auto scan = sluice::testing::scanMemory(inits[0], marker);
      init_scanned = scan.scanned;
      init_holds = !scan.hits.empty();
    }
    return {};
  };
  auto r =
      runSandboxed(shell("true", "holds"), RunHooks{.before_start = gate}, std::move(*prepared));
  ASSERT_TRUE(r) << r.error().where << ": " << r.error().message;
  ASSERT_TRUE(init_seen);
  EXPECT_GT(init_scanned, 0u);
  EXPECT_FALSE(init_holds) << "the sandbox's init has a copy of memory the caller filled later";
  // The control: a sandbox cloned late (no preparation) does hold it — the scan works.
  init_seen = false;
  auto late = runSandboxed(shell("true", "holds-late"), RunHooks{.before_start = gate});
  ASSERT_TRUE(late) << late.error().where << ": " << late.error().message;
  ASSERT_TRUE(init_seen);
  EXPECT_TRUE(init_holds);
  delete held;
}

}  // namespace
