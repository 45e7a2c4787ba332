// Sandbox-side processes: init and the program (see child.hpp).
#include "child.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "namespaces.hpp"
#include "plan_codec.hpp"
#include "seccomp.hpp"

namespace sluice::runner::detail {

void writeFully(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    p += n;
    size -= static_cast<size_t>(n);
  }
}

namespace {

[[noreturn]] void fail(const ChildPlan& plan, StepResult r) {
  reportStep(plan.fds.error_write, ChildMessage::kSetupFailed, r.step, r.err);
  ::_exit(kInitSetupFailed);
}

// Whether init exempted itself from the OOM killer (initSetUp); the program, which starts with
// init's value, must then go back to the default. Set by init before any program exists.
bool g_init_oom_exempt = false;

// Writes /proc/self/oom_score_adj (the sandbox's own /proc, mounted by then).
StepResult setOomScoreAdj(const char* value, const char* step) {
  int fd = ::open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return stepFail(step);
  const std::size_t n = std::strlen(value);
  const bool ok = ::write(fd, value, n) == static_cast<ssize_t>(n);
  const int err = errno;
  ::close(fd);
  return ok ? stepOk() : stepFail(step, err);
}

bool readByte(int fd, char expected) {
  char c = 0;
  ssize_t n;
  do n = ::read(fd, &c, 1);
  while (n < 0 && errno == EINTR);
  return n == 1 && c == expected;
}

// Whether this process has a child, living or not yet reaped (without reaping it).
bool hasChildren() {
  siginfo_t info{};
  return ::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) == 0;
}

// The program init runs now (a run's: 0; a session's exec: its sequence number; idle: -1) and
// the highest one a stop was asked for. A stop can arrive before the program exists (before a
// session's init has even read the exec): it is remembered, and the program killed once started.
volatile sig_atomic_t g_exec_seq = 0;
volatile sig_atomic_t g_stop_seq = -1;

// SIGUSR1/SIGTERM from sluice (timeout, CPU limit, stop request), carrying the exec's sequence
// number (sigqueue; a plain kill means the current one): init kills everything else in the
// namespace; the normal reaping path then reports the program's death. A late stop meant for
// an earlier exec of a session is ignored.
void onStop(int, siginfo_t* si, void*) {
  const int seq = si != nullptr && si->si_code == SI_QUEUE ? si->si_value.sival_int : g_exec_seq;
  if (seq > g_stop_seq) g_stop_seq = seq;
  if (seq == g_exec_seq) ::kill(-1, SIGKILL);
}

// The program's standard fds, then nothing else but the error pipe: init holds sluice's pipes
// (and, in a session, its control socket), none of which the program may keep.
StepResult setUpStdio(const ProgramLaunch& l) {
  int in = l.stdin_fd;
  if (in < 0) {
    in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (in < 0) return stepFail("open /dev/null for stdin");
  }
  if (::dup2(in, 0) < 0 || ::dup2(l.stdout_fd, 1) < 0 || ::dup2(l.stderr_fd, 2) < 0)
    return stepFail("set up stdio");
  int keep[] = {l.error_fd, l.landlock_ruleset};
  closeAllExcept(keep, 2);
  return stepOk();
}

// Searches PATH by hand with a stack buffer (execvpe may allocate); returns the errno to report.
int execProgram(const ProgramLaunch& l) {
  const char* cmd = l.argv[0];
  if (std::strchr(cmd, '/') != nullptr) {
    ::execve(cmd, l.argv, l.envp);
    return errno;
  }
  int err = ENOENT;
  char buf[4096];
  bool eacces = false;
  for (const std::string& dir : *l.path_dirs) {
    size_t dl = dir.size(), cl = std::strlen(cmd);
    if (dl + 1 + cl + 1 > sizeof buf) continue;
    std::memcpy(buf, dir.data(), dl);
    buf[dl] = '/';
    std::memcpy(buf + dl + 1, cmd, cl + 1);
    ::execve(buf, l.argv, l.envp);
    if (errno == EACCES)
      eacces = true;
    else if (errno != ENOENT && errno != ENOTDIR)
      return errno;
  }
  return err == ENOENT && eacces ? EACCES : err;
}

[[noreturn]] void programMain(const ProgramLaunch& l) {
  auto failExec = [&](StepResult r) {
    reportStep(l.error_fd, ChildMessage::kSetupFailed, r.step, r.err);
    ::_exit(kInitSetupFailed);
  };
  if (l.cpus != nullptr) (void)::sched_setaffinity(0, sizeof *l.cpus, l.cpus);
  // Default signal dispositions and mask for the program (init changed some).
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int s : {SIGTERM, SIGUSR1, SIGINT, SIGPIPE, SIGHUP}) ::sigaction(s, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  if (auto r = setUpStdio(l); !r) failExec(r);
  // A session of its own: no controlling terminal shared with sluice's caller.
  ::setsid();
  // Back to the default if init exempted itself (see initSetUp): the program and everything
  // it starts are what the OOM killer and memory.oom.group must be able to kill.
  if (g_init_oom_exempt || l.session)
    if (auto r = setOomScoreAdj(g_init_oom_exempt ? "0" : "1000", "set oom_score_adj"); !r)
      failExec(r);
  if (auto r = applyRlimits(*l.privileges); !r) failExec(r);
  if (auto r = dropPrivileges(*l.privileges, l.capability_bounds_dropped); !r) failExec(r);
  // As the sandbox user: a working directory it could not enter itself is refused.
  if (::chdir(l.cwd) != 0) failExec(stepFail("chdir to the working directory"));
  if (auto r = l.landlock_ruleset >= 0 ? restrictToLandlockRuleset(l.landlock_ruleset)
                                       : applyLandlock(*l.privileges);
      !r)
    failExec(r);
  if (l.seccomp != nullptr)
    if (auto r = loadSeccompProgram(*l.seccomp); !r) failExec(r);
  const int err = execProgram(l);
  reportStep(l.error_fd, ChildMessage::kExecFailed, "execve", err);
  ::_exit(err == ENOENT ? 127 : 126);
}

int programEntry(void* launch) { programMain(*static_cast<const ProgramLaunch*>(launch)); }

// 'C': the cgroup v1 `tasks` files of every hierarchy come over the channel, and init, being
// single-threaded, moves itself by writing "0" to each: a thread moving itself skips the
// kernel's global threadgroup lock, whose first taking waits for an RCU grace period
// (0.5-15 ms) that a write of our pid to cgroup.procs by sluice would pay.
void awaitCgroup(const ChildPlan& plan) {
  const ChildFds& f = plan.fds;
  char go = 0;
  ssize_t n;
  do n = ::read(f.go_read, &go, 1);
  while (n < 0 && errno == EINTR);
  if (n == 1 && go == 'G') return;
  if (n != 1 || go != 'C') ::_exit(kInitSetupFailed);
  char tag = 0;
  int fds[kMaxPassedFds];
  const Received got = receiveWithFds(f.listener_channel, &tag, 1, fds, kMaxPassedFds);
  if (got.bytes != 1 || tag != 'C' || got.fd_count == 0 || got.truncated)
    fail(plan, stepFail("receive cgroup files", EPROTO));
  for (int i = 0; i < got.fd_count; ++i) {
    const bool moved = ::write(fds[i], "0", 1) == 1;
    const int err = errno;
    ::close(fds[i]);
    if (!moved) fail(plan, stepFail("join cgroup", err));
  }
}

// Root: the new network namespace goes to the parent ('N') as soon as it exists, so that it
// can set up transparent capture in it whether this process still runs or has exited (through
// /proc/PID it could not be had once this process is gone). Sent without the fd if it cannot
// be opened (the parent then sets capture up in init's namespace): the parent waits for this
// message before it sends the plan, so a failed send is a failed helper (the parent then
// sees the channel's EOF). Unprivileged there is none: the parent cannot join it.
StepResult sendNetns(int channel) {
  const int ns = ::open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  const char tag = 'N';
  const bool sent = sendWithFds(channel, &tag, 1, &ns, ns >= 0 ? 1 : 0) == 1;
  const int err = errno;
  if (ns >= 0) ::close(ns);
  return sent ? stepOk() : stepFail("send the network namespace to sluice", err);
}

// A stack of `size` bytes for a child clone()d to run on it: mapped, not allocated (only the
// pages it touches are ever faulted in). Null when it cannot be mapped.
void* mapStack(std::size_t size) {
  void* s = ::mmap(nullptr, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK | MAP_NORESERVE, -1, 0);
  return s == MAP_FAILED ? nullptr : s;
}

// clone(2) of `fn(arg)` on `stack` (`size` bytes from mapStack), from its 16-byte aligned top.
pid_t cloneOn(void* stack, std::size_t size, int (*fn)(void*), int flags, void* arg) {
  const auto top = (reinterpret_cast<std::uintptr_t>(stack) + size) & ~std::uintptr_t{15};
  return ::clone(fn, reinterpret_cast<void*>(top), flags, arg);
}

// What the helper's init starts with (startInit).
struct InitStart {
  const ChildPlan* plan;
  int pid_write;  // the helper's; init keeps no copy
};

int initEntry(void* arg) {
  const auto* start = static_cast<const InitStart*>(arg);
  ::close(start->pid_write);
  initMain(*start->plan);
}

// The helper's init shares the helper's memory (CLONE_VM) instead of getting a copy of it: the
// helper only writes init's pid and exits, so the two never use that memory at once (init's
// plan, decoded by the helper, is read-only to both), and starting init copies no page tables
// and costs none of the copy-on-write faults a fork's child takes. Init runs on a stack of its
// own, mapped, not allocated: only the pages it touches are faulted in.
pid_t startInit(InitStart& start) {
  constexpr std::size_t kStack = 1024 * 1024;
  void* stack = mapStack(kStack);
  if (stack == nullptr) return -1;
  return cloneOn(stack, kStack, initEntry, CLONE_PARENT | CLONE_VM, &start);
}

}  // namespace

void reportStep(int fd, ChildMessage::Kind kind, const char* step, int err) {
  ChildMessage m;
  m.kind = kind;
  m.err = err;
  std::strncpy(m.step, step, sizeof m.step - 1);
  writeFully(fd, &m, sizeof m);
}

void closeAllExcept(int* keep, int count) {
  std::sort(keep, keep + count);
  unsigned lo = 3;
  for (int i = 0; i < count; ++i) {
    if (keep[i] < static_cast<int>(lo)) continue;
    if (static_cast<unsigned>(keep[i]) > lo) ::syscall(SYS_close_range, lo, keep[i] - 1, 0);
    lo = static_cast<unsigned>(keep[i]) + 1;
  }
  ::syscall(SYS_close_range, lo, ~0U, 0);
}

// The program's process, started like posix_spawn: CLONE_VM shares init's memory instead of
// copying its page tables (init is a copy of sluice, so a fork cost ~0.15 ms of every run), and
// CLONE_VFORK suspends init until the program has exec'd or exited, so the two never use that
// memory at once. Everything programMain does before execve is a raw system call on its own
// stack (no allocation, no locks, nothing glibc tracks per thread); the credentials, seccomp
// filter and Landlock domain it sets belong to its task alone.
//
// Its own stack until it execs: mapped, not allocated (only the pages it touches are ever
// faulted in), once per process (a session's init spawns one program per exec; CLONE_VFORK
// means the previous one no longer runs on it).
namespace {
constexpr std::size_t kProgramStack = 256 * 1024;
void* g_program_stack = nullptr;

void* programStack() {
  if (g_program_stack == nullptr) g_program_stack = mapStack(kProgramStack);
  return g_program_stack;
}
}  // namespace

pid_t spawnProgram(const ProgramLaunch& launch) {
  void* stack = programStack();
  if (stack == nullptr) return -1;
  return cloneOn(stack, kProgramStack, programEntry, CLONE_VM | CLONE_VFORK | SIGCHLD,
                 const_cast<ProgramLaunch*>(&launch));
}

bool prepareProgramStack() {
  // The top pages: programMain's frames and execProgram's path buffer.
  constexpr std::size_t kUsed = 16 * 1024;
  auto* stack = static_cast<char*>(programStack());
  if (stack == nullptr) return false;
  std::memset(stack + kProgramStack - kUsed, 0, kUsed);
  return true;
}

void initSetUp(const ChildPlan& plan) {
  const ChildFds& f = plan.fds;
  // If sluice dies (even SIGKILL), init dies, and with pid 1 gone the kernel kills every
  // process of the namespace.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  int keep[] = {f.go_read,          f.error_write,  f.report_write, f.control_read,
                f.listener_channel, f.stdout_write, f.stderr_write, f.stdin_read};
  closeAllExcept(keep, static_cast<int>(sizeof keep / sizeof keep[0]));
  if (plan.arg_start != nullptr && plan.arg_len > 0) {
    static const char kName[] = "sluice-init";
    std::memset(plan.arg_start, 0, plan.arg_len);
    std::memcpy(plan.arg_start, kName, std::min(sizeof kName, plan.arg_len) - 1);
  }
  ::prctl(PR_SET_NAME, "sluice-init", 0, 0, 0);
  // In a user namespace, nothing can be chowned to the sandbox uid before sluice has written
  // the uid/gid maps, which it signals with the same 'G'.
  bool have_go = false;
  if (plan.user_namespace) {
    if (!readByte(f.go_read, 'G')) ::_exit(kInitSetupFailed);
    have_go = true;
  }
  // Namespace and mount setup first: it overlaps with sluice's hand-off (the cgroup files or,
  // on v2, its write of our pid to cgroup.procs; the listener; the start gate).
  if (!plan.namespaces_ready) {
    if (::sethostname("sandbox", 7) != 0) fail(plan, stepFail("sethostname"));
    if (auto r = bringUpLoopback(); !r) fail(plan, r);
  }
  if (plan.network_proxy)
    if (auto r = sendProxyListener(f.listener_channel); !r) fail(plan, r);
  if (auto r = applyMountPlan(plan.mounts, plan.privileges.uid, plan.privileges.gid); !r)
    fail(plan, r);
  // Init should outlive a memory limit hit to report it: OOM_SCORE_ADJ_MIN keeps the OOM killer
  // from choosing it, and is the one exemption from cgroup v2's memory.oom.group kill (which
  // would otherwise take init along with the program). Lowering it needs CAP_SYS_RESOURCE in
  // the initial namespace; without it (unprivileged mode, some VMs' root) init stays killable
  // and sluice tells an OOM-killed init from a failed one by the cgroup's counters.
  g_init_oom_exempt =
      static_cast<bool>(setOomScoreAdj("-1000", "protect init from the OOM killer"));
  // Wait until sluice has put us into the cgroups ('G') or handed us their files to join
  // ('C'). EOF means sluice died (perhaps before PR_SET_PDEATHSIG took effect): give up.
  if (!have_go) awaitCgroup(plan);
  if (!plan.session) ::close(f.listener_channel);  // a session's init keeps it: its control
  // Unsharing the cgroup namespace only now makes our (limited) cgroup the namespace's root.
  if (::unshare(CLONE_NEWCGROUP) != 0) fail(plan, stepFail("unshare cgroup namespace"));
  // Wait until sluice is ready for the program (its proxy owns the listener, its audit store is
  // open). EOF means sluice gave up: it kills us.
  if (!readByte(f.go_read, 'A')) fail(plan, stepFail("sluice did not start the program", EPIPE));
}

void beginExec(int seq) { g_exec_seq = seq; }

void endExec() { g_exec_seq = -1; }

void killIfStopped() {
  if (g_exec_seq >= 0 && g_stop_seq >= g_exec_seq) ::kill(-1, SIGKILL);
}

void installInitSignalHandlers() {
  struct sigaction sa {};
  sa.sa_sigaction = onStop;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGUSR1, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  struct sigaction ign {};
  ign.sa_handler = SIG_IGN;
  ::sigaction(SIGINT, &ign, nullptr);
  ::sigaction(SIGPIPE, &ign, nullptr);
}

InitReport reapUntilEmpty(pid_t program) {
  InitReport rep;
  rep.program_started = 1;
  bool program_done = false;
  for (;;) {
    int status = 0;
    rusage ru{};
    pid_t p = ::wait4(-1, &status, __WALL, &ru);
    if (p < 0) {
      if (errno == EINTR) continue;
      break;  // ECHILD: nothing left
    }
    // What RUSAGE_CHILDREN would say, for this program alone (a session's init reaps many).
    timeradd(&rep.children.ru_utime, &ru.ru_utime, &rep.children.ru_utime);
    timeradd(&rep.children.ru_stime, &ru.ru_stime, &rep.children.ru_stime);
    rep.children.ru_maxrss = std::max(rep.children.ru_maxrss, ru.ru_maxrss);
    if (p == program && !program_done) {
      program_done = true;
      rep.wait_status = status;
      // The program is done: nothing it started may outlive it (daemons, setsid double-forks).
      // Everything in the namespace descends from init, and what the program left was handed
      // to init before the program could be reaped: with no child left, nothing is (kill(-1)
      // would walk every process of the host to find none).
      if (hasChildren()) ::kill(-1, SIGKILL);
    }
  }
  return rep;
}

void initMain(const ChildPlan& plan) {
  if (plan.session) sessionInitMain(plan);
  const ChildFds& f = plan.fds;
  initSetUp(plan);
  installInitSignalHandlers();
  ProgramLaunch launch;
  launch.argv = plan.argv.data();
  launch.envp = plan.envp.data();
  launch.path_dirs = &plan.path_dirs;
  launch.privileges = &plan.privileges;
  launch.seccomp = &plan.seccomp;
  launch.stdin_fd = plan.stdin_pipe ? f.stdin_read : -1;
  launch.stdout_fd = f.stdout_write;
  launch.stderr_fd = f.stderr_write;
  launch.error_fd = f.error_write;
  pid_t program = spawnProgram(launch);
  if (program < 0) fail(plan, stepFail("start program"));
  killIfStopped();  // a stop that came while it was being started

  // Init keeps no copy of the program's pipes or of the error pipe, so sluice sees EOF on them
  // as soon as the program and its descendants are gone (or the program execs, for errors).
  for (int fd : {f.stdout_write, f.stderr_write, f.error_write, f.go_read, f.stdin_read})
    ::close(fd);

  const InitReport rep = reapUntilEmpty(program);
  writeFully(f.report_write, &rep, sizeof rep);
  // Stay alive (keeping the mount namespace, and so /output, reachable via /proc/<pid>/root)
  // until sluice has copied the artifacts and closes the control pipe.
  for (;;) {
    char c;
    ssize_t n = ::read(f.control_read, &c, 1);
    if (n == 0 || (n < 0 && errno != EINTR)) break;
  }
  ::_exit(0);
}

void prepareMain(int plan_read, int pid_write, const ChildFds& f, bool user_namespace) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  int keep[] = {plan_read,      pid_write,      f.go_read,      f.error_write,      f.report_write,
                f.control_read, f.stdout_write, f.stderr_write, f.listener_channel, f.stdin_read};
  closeAllExcept(keep, static_cast<int>(sizeof keep / sizeof keep[0]));
  ::prctl(PR_SET_NAME, "sluice-prepare", 0, 0, 0);
  auto failed = [&](StepResult r) {
    reportStep(f.error_write, ChildMessage::kSetupFailed, r.step, r.err);
    ::_exit(kInitSetupFailed);
  };
  // Unprivileged, the user namespace comes first (in the same call), and the others belong
  // to it: the capabilities the helper has there are what it needs to set them up.
  const int ns = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWPID |
                 (user_namespace ? CLONE_NEWUSER : 0);
  if (::unshare(ns) != 0) failed(stepFail("unshare namespaces"));
  if (user_namespace) {
    const pid_t ready = 0;  // the parent writes the uid/gid maps now
    writeFully(pid_write, &ready, sizeof ready);
  } else if (auto r = sendNetns(f.listener_channel); !r) {
    failed(r);
  }
  if (::sethostname("sandbox", 7) != 0) failed(stepFail("sethostname"));
  if (auto r = bringUpLoopback(); !r) failed(r);

  std::string bytes;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(plan_read, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) failed(stepFail("read sandbox plan"));
    if (n == 0) break;
    bytes.append(buf, static_cast<std::size_t>(n));
  }
  if (bytes.empty()) ::_exit(0);  // the parent gave up before running anything
  static ChildPlan plan;          // init (a fork of this process) runs on it
  if (auto r = decodePlan(bytes, plan); !r) failed(stepFail("decode sandbox plan", EINVAL));
  plan.namespaces_ready = true;
  plan.fds = f;  // this process's numbers (a zygote's helper received them under others)
  ::close(plan_read);
  // CLONE_PARENT: init is the parent's child (it waits for it and receives PDEATHSIG from
  // it); being the first process made after unshare(CLONE_NEWPID), it is pid 1 there.
  static InitStart start{&plan, pid_write};
  const pid_t init = startInit(start);
  if (init < 0) failed(stepFail("fork sandbox init"));
  writeFully(pid_write, &init, sizeof init);
  ::_exit(0);
}

}  // namespace sluice::runner::detail
