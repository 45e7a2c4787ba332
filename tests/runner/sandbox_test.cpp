// runSandboxed() for real (root): output and exit paths, file system view, privileges, network
// isolation, the proxy listener hand-off, artifacts, every limit named from the kernel's
// counters, and teardown leaving no process or cgroup behind.
#include "sluice/runner/sandbox.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "isolation.hpp"
#include "proc_scan.hpp"
#include "proc_stat.hpp"
#include "sluice/runner/cgroup.hpp"

namespace fs = std::filesystem;
using namespace sluice::runner;
using namespace std::chrono_literals;

namespace {

RunSpec bash(const std::string& script) {
  RunSpec s;
  s.argv = {"/bin/bash", "-c", script};
  s.execution_id = uniqueId("bash");
  s.limits.timeout = 20s;
  s.limits.cpu_time = 10s;
  return s;
}

RunResult mustRun(const RunSpec& spec, const ListenerCallback& cb = {}) {
  auto r = runSandboxed(spec, RunHooks{.on_listener = cb});
  EXPECT_TRUE(r) << (r ? "" : r.error().where + ": " + r.error().message);
  return r ? *r : RunResult{};
}

bool processWithArgExists(const std::string& marker) {
  for (const auto& e : fs::directory_iterator("/proc")) {
    std::ifstream in(e.path() / "cmdline");
    std::string cmd((std::istreambuf_iterator<char>(in)), {});
    if (cmd.find(marker) != std::string::npos && e.path().filename() != std::to_string(::getpid()))
      return true;
  }
  return false;
}

TEST(Sandbox, CapturesOutputAndExitStatus) {
  REQUIRE_SANDBOX();
  auto r = mustRun(bash("echo out; echo err >&2; exit 3"));
  EXPECT_EQ(r.out.text, "out\n");
  EXPECT_EQ(r.err.text, "err\n");
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.sluiceExitStatus(), 3);
  EXPECT_EQ(r.limit_hit, LimitHit::kNone);
  EXPECT_EQ(r.isolation.uid, 65534u);
  EXPECT_TRUE(r.isolation.seccomp);
}

TEST(Sandbox, LiveSinkSeesOutput) {
  REQUIRE_SANDBOX();
  std::string seen;
  RunHooks hooks;
  hooks.live = [&](int stream, std::string_view d) {
    if (stream == 1) seen.append(d);
  };
  auto r = runSandboxed(bash("echo live"), hooks);
  ASSERT_TRUE(r);
  EXPECT_EQ(seen, "live\n");
}

TEST(Sandbox, SignalDeathIs128PlusN) {
  REQUIRE_SANDBOX();
  auto r = mustRun(bash("kill -TERM $$"));
  EXPECT_EQ(r.signal, SIGTERM);
  EXPECT_EQ(r.sluiceExitStatus(), 128 + SIGTERM);
}

TEST(Sandbox, MissingCommandIs127AndNonExecutableIs126) {
  REQUIRE_SANDBOX();
  RunSpec s = bash("");
  s.argv = {"no-such-command-xyz"};
  auto r = runSandboxed(s);
  ASSERT_FALSE(r);
  EXPECT_EQ(sluice::base::exitStatus(r.error().code), 127);
  s.argv = {"/etc/passwd"};
  s.execution_id = uniqueId("noexec");
  r = runSandboxed(s);
  ASSERT_FALSE(r);
  EXPECT_EQ(sluice::base::exitStatus(r.error().code), 126);
}

TEST(Sandbox, SetupFailureNamesTheStep) {
  REQUIRE_SANDBOX();
  RunSpec s = bash("true");
  s.inputs.push_back({"/nonexistent/input/file", "x"});
  auto r = runSandboxed(s);
  ASSERT_FALSE(r);
  EXPECT_EQ(sluice::base::exitStatus(r.error().code), 125);
  EXPECT_EQ(r.error().where, "input");
}

TEST(Sandbox, HostFilesAndEnvironmentAreNotVisible) {
  REQUIRE_SANDBOX();
  const fs::path host_file = "/tmp/sluice-host-only-" + std::to_string(::getpid());
  std::ofstream(host_file) << "secret";
  ::setenv("SLUICE_HOST_ONLY_VAR", "hostvalue", 1);
  auto r = mustRun(
      bash("for p in /root /home /var/lib /var/log /run /boot /sys /mnt " + host_file.string() +
           "; do [ -e $p ] && echo VISIBLE $p; done; echo var: $(ls -A /var); "
           "env | grep -c hostvalue; cat "
           "/proc/1/environ 2>/dev/null | wc -c; "
           "ls /proc | grep -E '^[0-9]+$' | wc -l; tr '\\0' ' ' < /proc/1/cmdline; echo"));
  fs::remove(host_file);
  EXPECT_EQ(r.out.text.find("VISIBLE"), std::string::npos) << r.out.text;
  // /var holds only the sandbox's own empty tmp and cache, none of the host's /var.
  EXPECT_NE(r.out.text.find("var: cache tmp\n"), std::string::npos) << r.out.text;
  EXPECT_NE(r.out.text.find("0\n0\n"), std::string::npos) << r.out.text;
  // pid 1 is sluice's init, a copy of the caller: its command line is scrubbed.
  EXPECT_NE(r.out.text.find("sluice-init"), std::string::npos) << r.out.text;
  EXPECT_EQ(r.out.text.find("runner_test"), std::string::npos) << r.out.text;
}

TEST(Sandbox, WritesOnlyInsideWorkTmpOutput) {
  REQUIRE_SANDBOX();
  auto r = mustRun(
      bash("for p in /x /etc/x /usr/x /bin/x /input/x /proc/x /dev/x /var/x; do "
           "  (echo a > $p) 2>/dev/null && echo WROTE $p; done; "
           "for p in /work/a /tmp/a /output/a /dev/shm/a; do (echo a > $p) && echo ok $p; done; "
           "echo hi > /dev/null && echo devnull"));
  EXPECT_EQ(r.out.text.find("WROTE"), std::string::npos) << r.out.text;
  for (const char* p : {"ok /work/a", "ok /tmp/a", "ok /output/a", "ok /dev/shm/a", "devnull"})
    EXPECT_NE(r.out.text.find(p), std::string::npos) << p << "\n" << r.out.text;
}

TEST(Sandbox, PrivilegesAreDropped) {
  REQUIRE_SANDBOX();
  auto r = mustRun(bash(
      "id -u; id -G; grep -E '^(CapEff|CapBnd|CapPrm|NoNewPrivs|Seccomp):' /proc/self/status"));
  EXPECT_NE(r.out.text.find("65534\n65534\n"), std::string::npos) << r.out.text;
  EXPECT_NE(r.out.text.find("CapEff:\t0000000000000000"), std::string::npos);
  EXPECT_NE(r.out.text.find("CapBnd:\t0000000000000000"), std::string::npos);
  EXPECT_NE(r.out.text.find("NoNewPrivs:\t1"), std::string::npos);
  EXPECT_NE(r.out.text.find("Seccomp:\t2"), std::string::npos);
}

TEST(Sandbox, SeccompRefusesNamespacesMountsPtraceAndRawSockets) {
  REQUIRE_SANDBOX();
  auto r = mustRun(bash(R"(python3 - <<'PY'
import ctypes, errno, os, socket
libc = ctypes.CDLL(None, use_errno=True)
def check(name, f):
    try:
        rc = f()
        print(name, "ALLOWED" if rc in (None, 0) or (isinstance(rc, int) and rc >= 0) else "refused")
    except OSError as e:
        print(name, "refused", e.errno)
check("unshare_user", lambda: libc.unshare(0x10000000))
check("unshare_net", lambda: libc.unshare(0x40000000))
check("mount", lambda: libc.mount(b"none", b"/tmp", b"tmpfs", 0, None))
check("ptrace_parent", lambda: libc.ptrace(16, 1, None, None))
check("packet", lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW))
check("netlink", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0))
check("raw_icmp", lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))
check("bpf", lambda: libc.syscall(321, 0, None, 0))
PY)"));
  EXPECT_EQ(r.out.text.find("ALLOWED"), std::string::npos) << r.out.text;
  EXPECT_NE(r.out.text.find("packet refused"), std::string::npos) << r.out.text;
}

TEST(Sandbox, NoNetworkButLoopback) {
  REQUIRE_SANDBOX();
  // A service on the host's loopback must be unreachable from inside.
  int srv = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(srv, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(srv, 4), 0);
  socklen_t len = sizeof a;
  ::getsockname(srv, reinterpret_cast<sockaddr*>(&a), &len);
  const int port = ntohs(a.sin_port);
  auto r =
      mustRun(bash("for t in 127.0.0.1/" + std::to_string(port) +
                   " 127.0.0.1/3128 10.0.0.1/80 1.1.1.1/443; do "
                   "  (timeout 3 bash -c \"exec 3<>/dev/tcp/${t%/*}/${t#*/}\") 2>/dev/null && echo "
                   "CONNECTED $t; done; "
                   "python3 -c 'import socket; s=socket.socket(socket.AF_INET6); s.settimeout(2); "
                   "s.connect((\"2606:4700::1111\", 443))' 2>/dev/null && echo CONNECTED v6; "
                   "python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
                   "s.sendto(b\"x\", (\"8.8.8.8\", 53))' 2>/dev/null && echo SENT udp; "
                   "getent hosts example.com && echo RESOLVED; echo done"));
  pollfd p{srv, POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 0), 0) << "the host loopback service saw a connection";
  ::close(srv);
  EXPECT_EQ(r.out.text.find("CONNECTED"), std::string::npos) << r.out.text;
  EXPECT_EQ(r.out.text.find("SENT"), std::string::npos) << r.out.text;
  EXPECT_EQ(r.out.text.find("RESOLVED"), std::string::npos) << r.out.text;
  EXPECT_NE(r.out.text.find("done"), std::string::npos);
}

// Init holds sluice's pipes and, with the proxy, the listener channel: the program gets none of
// them, only its stdio (ls runs in a child of bash, so bash's fds are listed).
TEST(Sandbox, TheProgramHoldsOnlyItsStdio) {
  REQUIRE_SANDBOX();
  for (const bool proxy : {false, true}) {
    RunSpec s = bash("ls /proc/$$/fd; true");
    s.network_proxy = proxy;
    s.stdin_data = proxy ? "x\n" : "";
    auto r = mustRun(s, [](int fd) -> std::expected<void, std::string> {
      ::close(fd);
      return {};
    });
    EXPECT_EQ(r.out.text, "0\n1\n2\n") << "proxy: " << proxy << " " << r.err.text;
  }
}

TEST(Sandbox, ProxyListenerIsHandedToTheCaller) {
  REQUIRE_SANDBOX();
  RunSpec s = bash(
      "exec 3<>/dev/tcp/127.0.0.1/3128; echo ping >&3; read -r line <&3; echo got $line; "
      "echo $HTTPS_PROXY");
  s.network_proxy = true;
  std::thread server;
  int calls = 0;
  RunHooks hooks;
  hooks.on_listener = [&](int fd) -> std::expected<void, std::string> {
    // The second call hands the IPv6 listener ([::1]:3128); this test talks IPv4 only.
    if (++calls > 1) {
      ::close(fd);
      return {};
    }
    server = std::thread([fd] {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 10000) == 1) {
        int c = ::accept(fd, nullptr, nullptr);
        char buf[16];
        if (c >= 0 && ::read(c, buf, sizeof buf) > 0) (void)!::write(c, "pong\n", 5);
        if (c >= 0) ::close(c);
      }
      ::close(fd);
    });
    return {};
  };
  auto r = runSandboxed(s, hooks);
  if (server.joinable()) server.join();
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(r->out.text, "got pong\nhttp://127.0.0.1:3128\n");
}

TEST(Sandbox, ListenerCallbackErrorAbortsWith125) {
  REQUIRE_SANDBOX();
  RunSpec s = bash("echo should-not-run");
  s.network_proxy = true;
  RunHooks hooks;
  hooks.on_listener = [](int fd) -> std::expected<void, std::string> {
    ::close(fd);
    return std::unexpected("proxy refused");
  };
  auto r = runSandboxed(s, hooks);
  ASSERT_FALSE(r);
  EXPECT_EQ(sluice::base::exitStatus(r.error().code), 125);
  EXPECT_EQ(r.error().where, "proxy listener");
}

TEST(Sandbox, InputsAreReadOnlyAndOutputsAreCopiedWithHashes) {
  REQUIRE_SANDBOX();
  const fs::path base = fs::temp_directory_path() / ("sluice-io-" + std::to_string(::getpid()));
  fs::remove_all(base);
  fs::create_directories(base / "in");
  std::ofstream(base / "in" / "data.csv") << "a,b\n1,2\n";
  RunSpec s = bash(
      "cat /input/data/data.csv; (echo x > /input/data/new) 2>/dev/null && echo WROTE; "
      "echo hello > /output/result.txt; mkdir /output/sub; printf abc > /output/sub/x; "
      "ln -s /etc/passwd /output/link");
  s.inputs.push_back({base / "in", "data"});
  s.output_dir = base / "out";
  auto r = mustRun(s);
  EXPECT_EQ(r.out.text, "a,b\n1,2\n");
  ASSERT_EQ(r.artifacts.size(), 2u);
  EXPECT_EQ(r.artifacts[0].path, "result.txt");
  EXPECT_EQ(r.artifacts[0].bytes, 6u);
  EXPECT_EQ(r.artifacts[0].sha256,
            "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03");
  EXPECT_EQ(r.artifacts[1].path, "sub/x");
  EXPECT_EQ(r.artifacts[1].sha256,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  std::ifstream copied(base / "out" / "result.txt");
  std::string text((std::istreambuf_iterator<char>(copied)), {});
  EXPECT_EQ(text, "hello\n");
  EXPECT_FALSE(fs::exists(fs::symlink_status(base / "out" / "link")));
  fs::remove_all(base);
}

TEST(Sandbox, NothingSurvivesTheProgram) {
  REQUIRE_SANDBOX();
  const std::string marker = "31337" + std::to_string(::getpid());
  RunSpec s = bash("setsid bash -c 'sleep " + marker +
                   "' </dev/null >/dev/null 2>&1 & "
                   "(sleep " +
                   marker + " &) ; echo started");
  auto r = mustRun(s);
  EXPECT_EQ(r.out.text, "started\n");
  EXPECT_FALSE(processWithArgExists(marker));
  for (const std::string& name : sluice::testing::sluiceCgroupNames())
    EXPECT_EQ(name.find(s.execution_id), std::string::npos) << name;
}

TEST(Sandbox, StopRequestTearsDown) {
  REQUIRE_SANDBOX();
  installStopHandlers();
  std::thread stopper([] {
    std::this_thread::sleep_for(300ms);
    requestStop(SIGTERM);
  });
  auto r = mustRun(bash("sleep 30"));
  stopper.join();
  EXPECT_TRUE(r.stopped_by_request);
  EXPECT_EQ(r.sluiceExitStatus(), 128 + SIGTERM);
}

TEST(SandboxLimits, Timeout) {
  REQUIRE_SANDBOX();
  RunSpec s = bash("sleep 60");
  s.limits.timeout = 500ms;
  auto r = mustRun(s);
  EXPECT_EQ(r.limit_hit, LimitHit::kTimeout);
  EXPECT_EQ(r.sluiceExitStatus(), 124);
}

TEST(SandboxLimits, CpuTimeAcrossProcesses) {
  REQUIRE_SANDBOX();
  // Two busy loops: neither reaches the per-process RLIMIT_CPU quickly, the cgroup total does.
  RunSpec s = bash("(while :; do :; done) & while :; do :; done");
  s.limits.cpu_time = 1s;
  s.limits.timeout = 30s;
  auto r = mustRun(s);
  EXPECT_EQ(r.limit_hit, LimitHit::kCpu);
  EXPECT_EQ(r.sluiceExitStatus(), 124);
}

TEST(SandboxLimits, Memory) {
  REQUIRE_SANDBOX();
  RunSpec s = bash("python3 -c 'a=[]\nwhile True: a.append(bytearray(8<<20))'");
  s.limits.memory = 64ull << 20;
  auto r = mustRun(s);
  EXPECT_EQ(r.limit_hit, LimitHit::kMemory);
  EXPECT_EQ(r.sluiceExitStatus(), 124);
}

TEST(SandboxLimits, TheProgramStaysKillableByTheOomKiller) {
  // Init exempts itself (oom_score_adj -1000) where it may; the program must not inherit that,
  // or a memory limit could never stop it.
  REQUIRE_SANDBOX();
  auto r = mustRun(bash("cat /proc/self/oom_score_adj; sh -c 'cat /proc/self/oom_score_adj'"));
  EXPECT_EQ(r.out.text, "0\n0\n") << r.err.text;
}

TEST(SandboxLimits, MemoryIsNamedEvenWhenTheOomKillerTakesInit) {
  REQUIRE_SANDBOX();
  // Init is a copy of this process, cloned here (no prepared sandbox): 256 MiB touched now
  // gives it the largest resident set in the sandbox's cgroup, so unless init could exempt
  // itself (oom_score_adj -1000 needs CAP_SYS_RESOURCE, which the CI VMs' root lacks) the OOM
  // killer picks init, not python — as cgroup v2's memory.oom.group would kill it anyway.
  std::vector<char> ballast(256u << 20);
  std::memset(ballast.data(), 1, ballast.size());
  RunSpec s = bash("python3 -c 'a=[]\nwhile True: a.append(bytearray(8<<20))'");
  s.limits.memory = 64ull << 20;
  auto r = runSandboxed(s);
  ASSERT_TRUE(r) << r.error().where << ": " << r.error().message;
  EXPECT_EQ(r->limit_hit, LimitHit::kMemory);
  EXPECT_EQ(r->sluiceExitStatus(), 124);
  EXPECT_GT(ballast[ballast.size() / 2], 0);
}

TEST(SandboxLimits, Pids) {
  REQUIRE_SANDBOX();
  RunSpec s = bash(R"(python3 - <<'PY'
import os, sys, time
kids = []
for i in range(200):
    try:
        pid = os.fork()
    except OSError:
        sys.exit(1)
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    kids.append(pid)
sys.exit(0)
PY)");
  s.limits.pids = 16;
  auto r = mustRun(s);
  EXPECT_EQ(r.limit_hit, LimitHit::kPids);
  EXPECT_EQ(r.sluiceExitStatus(), 124);
  EXPECT_LE(r.usage.pids_peak, 16u);
}

TEST(SandboxLimits, Disk) {
  REQUIRE_SANDBOX();
  RunSpec s = bash("for i in $(seq 100); do head -c 1048576 /dev/zero > /work/f$i || exit 1; done");
  s.limits.disk = 8ull << 20;
  auto r = mustRun(s);
  EXPECT_EQ(r.limit_hit, LimitHit::kDisk);
  EXPECT_EQ(r.sluiceExitStatus(), 124);
}

TEST(SandboxLimits, FileSize) {
  REQUIRE_SANDBOX();
  RunSpec s = bash("");
  s.argv = {"/bin/dd", "if=/dev/zero", "of=/work/big", "bs=1M", "count=8"};
  s.limits.file_size = 1ull << 20;
  auto r = mustRun(s);
  EXPECT_EQ(r.signal, SIGXFSZ);
  EXPECT_EQ(r.limit_hit, LimitHit::kFileSize);
  EXPECT_EQ(r.sluiceExitStatus(), 124);
}

TEST(SandboxLimits, OutputIsTruncatedAndCounted) {
  REQUIRE_SANDBOX();
  RunSpec s = bash("head -c 300000 /dev/zero | tr '\\0' a");
  s.limits.output = 1000;
  auto r = mustRun(s);
  EXPECT_EQ(r.out.text.size(), 1000u);
  EXPECT_EQ(r.out.bytes, 300000u);
  EXPECT_TRUE(r.out.truncated);
  EXPECT_EQ(r.limit_hit, LimitHit::kOutput);
  EXPECT_EQ(r.sluiceExitStatus(), 0);  // truncation never changes the status
}

}  // namespace

namespace {

TEST(Gc, RemovesLeftoversOfDeadOwnersOnly) {
  REQUIRE_SANDBOX();
  auto layout = sluice::runner::detectCgroupLayout();
  ASSERT_TRUE(layout);
  // pid 4194304 is above the kernel's maximum pid_max: its owner cannot be alive.
  auto dead = sluice::runner::Cgroup::create(*layout, "4194304.1.t-gc-dead", Limits{});
  ASSERT_TRUE(dead) << dead.error().message;
  auto live =
      sluice::runner::Cgroup::create(*layout, sluice::runner::cgroupName("t-gc-live"), Limits{});
  ASSERT_TRUE(live) << live.error().message;
  const auto dead_dirs = dead->dirs();
  auto report = collectGarbage();
  ASSERT_TRUE(report) << report.error();
  for (const auto& d : dead_dirs) EXPECT_FALSE(fs::exists(d)) << d;
  for (const auto& d : live->dirs()) EXPECT_TRUE(fs::exists(d)) << d;
  EXPECT_TRUE(live->remove());
  (void)dead->remove();
}

// /proc/PID/stat's fields are counted after the last ')': a process may name itself with
// spaces and parentheses to shift them (the start time decides whether gc removes a cgroup).
TEST(ProcStat, FieldsOfAProcessWhoseNameHoldsParenthesesAndSpaces) {
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::prctl(PR_SET_NAME, "x) 9 9 (y) 7 7", 0, 0, 0);
    (void)!::write(ready[1], "r", 1);
    ::pause();
    ::_exit(0);
  }
  char c;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  const sluice::runner::detail::ProcStat stat(child);
  EXPECT_EQ(stat.field(4), static_cast<std::uint64_t>(::getpid()));  // ppid
  const auto start = stat.field(22);
  ASSERT_TRUE(start);
  EXPECT_GT(*start, 0u);
  EXPECT_EQ(sluice::runner::processStartTime(child), start);
  EXPECT_GE(sluice::runner::detail::ProcStat().field(20).value_or(0), 1u);  // our threads
  EXPECT_FALSE(sluice::runner::detail::ProcStat(4194304).field(22));        // above pid_max
  EXPECT_FALSE(stat.field(2));  // the name is no number field
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  ::close(ready[0]);
  ::close(ready[1]);
}

}  // namespace

// /output must not amplify onto the host. Sparse files use no space in the sandbox
// but have an apparent size; the host copy stays within the disk limit and the receipt says
// what was left behind.
#include <sys/stat.h>

#include "sluice/runner/receipt.hpp"

namespace {

TEST(SandboxArtifacts, SparseFilesCannotAmplifyOntoTheHost) {
  REQUIRE_SANDBOX();
  const fs::path out =
      fs::temp_directory_path() / ("sluice-sparse-out-" + std::to_string(::getpid()));
  fs::remove_all(out);
  RunSpec s = bash("for i in $(seq 1 20); do truncate -s 16M /output/f$i || exit 1; done");
  s.limits.disk = 16ull << 20;
  s.output_dir = out;
  auto r = mustRun(s);
  EXPECT_EQ(r.exit_code, 0) << r.err.text;
  EXPECT_EQ(r.limit_hit, LimitHit::kNone);
  std::uint64_t apparent = 0, allocated = 0;
  for (const auto& e : fs::recursive_directory_iterator(out)) {
    struct stat st {};
    ASSERT_EQ(::lstat(e.path().c_str(), &st), 0);
    if (S_ISREG(st.st_mode)) {
      apparent += static_cast<std::uint64_t>(st.st_size);
      allocated += static_cast<std::uint64_t>(st.st_blocks) * 512;
    }
  }
  EXPECT_LE(apparent, 16ull << 20);
  EXPECT_LE(allocated, 16ull << 20);
  EXPECT_EQ(r.artifacts.size(), 1u);
  ASSERT_TRUE(r.artifacts_truncated);
  EXPECT_EQ(r.artifacts_truncated->reason, ArtifactSkip::kDiskBudget);
  EXPECT_EQ(r.artifacts_truncated->skipped, 19u);
  const auto receipt = buildReceipt(s, r, ReceiptContext{});
  EXPECT_EQ(receipt["artifacts_truncated"]["reason"], "disk_budget");
  EXPECT_EQ(receipt["artifacts_truncated"]["skipped"], 19);
  fs::remove_all(out);
}

}  // namespace
