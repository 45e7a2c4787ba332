// The parent side of a sandboxed run: prepares everything the child needs (so the child never
// allocates), gets init into new namespaces (forked from a helper that prepareSandbox() started
// building them with, or cloned here), places it in its cgroup, hands the proxy listener to the
// caller, passes the start gate, relays output, enforces wall-clock and CPU limits, collects
// /output and the kernel's counters, and tears everything down. See docs/sandbox.md.
#include "sluice/runner/sandbox.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>

#include "artifacts.hpp"
#include "child.hpp"
#include "namespaces.hpp"
#include "plan_codec.hpp"
#include "seccomp.hpp"
#include "sluice/runner/cgroup.hpp"
#include "sluice/runner/environment.hpp"

namespace sluice::runner {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::atomic<int> g_stop_signal{0};
int g_stop_pipe[2] = {-1, -1};

void onStopSignal(int sig) {
  g_stop_signal.store(sig);
  if (g_stop_pipe[1] >= 0) {
    int saved = errno;
    (void)!::write(g_stop_pipe[1], "s", 1);
    errno = saved;
  }
}

std::shared_ptr<spdlog::logger> logger() {
  static std::shared_ptr<spdlog::logger> log = [] {
    auto l = spdlog::get("runner");
    if (l) return l;
    return spdlog::default_logger()->clone("runner");
  }();
  return log;
}

// An owned file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    reset(std::exchange(o.fd_, -1));
    return *this;
  }
  ~Fd() { reset(); }
  int get() const { return fd_; }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

SetupError setupError(std::string step, std::string message) {
  return SetupError{SetupError::Kind::kSetup, std::move(step), std::move(message)};
}

bool makePipe(Fd& r, Fd& w) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return false;
  r.reset(p[0]);
  w.reset(p[1]);
  return true;
}

// Everything between sluice and the sandbox's init and program (see detail::ChildFds).
struct Pipes {
  Fd go_r, go_w, err_r, err_w, rep_r, rep_w, ctl_r, ctl_w, out_r, out_w, errs_r, errs_w;
  Fd chan_parent, chan_child;

  std::expected<void, SetupError> make() {
    if (!makePipe(go_r, go_w) || !makePipe(err_r, err_w) || !makePipe(rep_r, rep_w) ||
        !makePipe(ctl_r, ctl_w) || !makePipe(out_r, out_w) || !makePipe(errs_r, errs_w))
      return std::unexpected(setupError("pipes", std::strerror(errno)));
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
      return std::unexpected(setupError("socketpair", std::strerror(errno)));
    chan_parent.reset(sv[0]);
    chan_child.reset(sv[1]);
    return {};
  }
  detail::ChildFds childFds() const {
    return {go_r.get(),       err_w.get(), rep_w.get(), ctl_r.get(),
            chan_child.get(), out_w.get(), errs_w.get()};
  }
  void closeChildEnds() {
    go_r.reset();
    err_w.reset();
    rep_w.reset();
    ctl_r.reset();
    chan_child.reset();
    out_w.reset();
    errs_w.reset();
  }
};

bool writeAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

int capLastCap() {
  static int v = [] {
    std::ifstream in("/proc/sys/kernel/cap_last_cap");
    int n = 40;
    in >> n;
    return n;
  }();
  return v;
}

int cachedLandlockAbi() {
  static const int abi = detail::landlockAbi();
  return abi;
}

bool validExecutionId(const std::string& id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
          c == '_' || c == '.'))
      return false;
  return true;
}

// Builds the data the child side needs; pointers into its own storage, so it must not move
// after finalize().
std::expected<void, SetupError> buildChildPlan(const RunSpec& spec, bool user_namespace,
                                               detail::ChildPlan& plan) {
  auto mounts = detail::buildMountPlan(spec, user_namespace);
  if (!mounts) return std::unexpected(mounts.error());
  plan.mounts = std::move(*mounts);
  plan.seccomp = detail::precompiledSeccompProgram();
  auto env = buildEnvironment(spec.env, spec.network_proxy);
  if (!env) return std::unexpected(setupError("environment", env.error()));
  plan.env_storage = std::move(*env);
  plan.argv_storage = spec.argv;
  for (std::string& s : plan.argv_storage) plan.argv.push_back(s.data());
  plan.argv.push_back(nullptr);
  for (std::string& s : plan.env_storage) plan.envp.push_back(s.data());
  plan.envp.push_back(nullptr);
  std::string path = kSandboxPath;
  for (size_t start = 0; start <= path.size();) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    plan.path_dirs.push_back(path.substr(start, end - start));
    start = end + 1;
  }

  detail::PrivilegePlan& p = plan.privileges;
  p.uid = spec.uid;
  p.gid = spec.gid;
  p.cap_last = capLastCap();
  p.landlock_abi = cachedLandlockAbi();
  auto add = [&](int res, rlim_t soft, rlim_t hard) {
    p.rlimits[p.rlimit_count++] = {res, rlimit{soft, hard}};
  };
  const Limits& l = spec.limits;
  if (l.cpu_time.count() > 0) {
    // Per process, in whole seconds: SIGXCPU at the soft limit, SIGKILL one second later. The
    // cgroup's total is checked by the parent as well (processes could share the work).
    auto secs = static_cast<rlim_t>((l.cpu_time.count() + 999) / 1000);
    add(RLIMIT_CPU, secs, secs + 1);
  }
  const std::uint64_t fsize = l.file_size ? l.file_size : l.disk;
  if (fsize) add(RLIMIT_FSIZE, fsize, fsize);
  if (l.open_files) add(RLIMIT_NOFILE, l.open_files, l.open_files);
  // Without cgroups, RLIMIT_NPROC stands in for pids.max. It counts processes per uid per
  // user namespace, i.e. exactly the sandbox's.
  if (user_namespace && l.pids) add(RLIMIT_NPROC, l.pids, l.pids);
  add(RLIMIT_CORE, 0, 0);  // no core dumps of sandboxed code anywhere
  plan.network_proxy = spec.network_proxy;
  plan.user_namespace = user_namespace;
  p.user_namespace = user_namespace;
  // Fields 48 and 49 of /proc/self/stat: where our argv strings live (the child's copy of this
  // memory is what its /proc/PID/cmdline shows).
  {
    std::ifstream in("/proc/self/stat");
    std::string stat((std::istreambuf_iterator<char>(in)), {});
    const auto close = stat.rfind(')');
    if (close != std::string::npos) {
      std::istringstream rest(stat.substr(close + 1));
      std::string field;
      unsigned long long start = 0, end = 0;
      for (int i = 3; i <= 49 && rest >> field; ++i) {
        if (i == 48) start = std::stoull(field);
        if (i == 49) end = std::stoull(field);
      }
      if (start != 0 && end > start) {
        plan.arg_start = reinterpret_cast<char*>(static_cast<std::uintptr_t>(start));
        plan.arg_len = static_cast<std::size_t>(end - start);
      }
    }
  }
  return {};
}

// User-namespace mode: the sandbox uid/gid map to the caller's own (the only mapping an
// unprivileged process may write); setgroups must be denied first.
std::expected<void, SetupError> writeIdMaps(pid_t pid, uid_t uid, gid_t gid) {
  const std::string base = "/proc/" + std::to_string(pid) + "/";
  auto put = [&](const std::string& file,
                 const std::string& text) -> std::expected<void, SetupError> {
    int fd = ::open((base + file).c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return std::unexpected(setupError("user namespace " + file, std::strerror(errno)));
    ssize_t n = ::write(fd, text.data(), text.size());
    int e = errno;
    ::close(fd);
    if (n != static_cast<ssize_t>(text.size()))
      return std::unexpected(setupError("user namespace " + file, std::strerror(e)));
    return {};
  };
  if (auto r = put("setgroups", "deny"); !r) return r;
  if (auto r = put("uid_map", std::to_string(uid) + " " + std::to_string(::geteuid()) + " 1"); !r)
    return r;
  return put("gid_map", std::to_string(gid) + " " + std::to_string(::getegid()) + " 1");
}

std::string childMessageText(const detail::ChildMessage& m) {
  std::string step(m.step, strnlen(m.step, sizeof m.step));
  return step + ": " + std::strerror(m.err);
}

void drainStream(int fd, StreamCapture& cap, std::uint64_t limit, int stream,
                 const OutputSink& live, bool& open) {
  char buf[65536];
  ssize_t n = ::read(fd, buf, sizeof buf);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (n <= 0) {
    open = false;
    return;
  }
  cap.bytes += static_cast<std::uint64_t>(n);
  const std::uint64_t room = limit == 0                ? static_cast<std::uint64_t>(n)
                             : cap.text.size() < limit ? limit - cap.text.size()
                                                       : 0;
  const size_t take =
      static_cast<size_t>(std::min<std::uint64_t>(room, static_cast<std::uint64_t>(n)));
  cap.text.append(buf, take);
  if (take < static_cast<size_t>(n)) cap.truncated = true;
  if (live) live(stream, std::string_view(buf, static_cast<size_t>(n)));
}

}  // namespace

struct PreparedSandbox {
  pid_t helper = -1;            // -1 once reaped
  bool user_namespace = false;  // not root: the helper also unshares a user namespace
  Fd plan_w;                    // -> helper: the encoded plan, then EOF
  Fd pid_r;                     // <- helper: init's pid
  Pipes pipes;

  void reapHelper(bool kill) {
    if (helper <= 0) return;
    if (kill) ::kill(helper, SIGKILL);
    int st;
    while (::waitpid(helper, &st, 0) < 0 && errno == EINTR) {
    }
    helper = -1;
  }
  ~PreparedSandbox() { reapHelper(true); }
};

void PreparedSandboxDeleter::operator()(PreparedSandbox* p) const { delete p; }

namespace {

// Threads of this process (/proc/self/stat field 20), or 0 if unknown.
long threadCount() {
  int fd = ::open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[1024];
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  const char* p = std::strrchr(buf, ')');  // the command name may hold spaces and parentheses
  if (!p) return 0;
  long threads = 0;
  // After ')': state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime
  // stime cutime cstime priority nice num_threads (fields 3..20).
  if (std::sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %ld",
                  &threads) != 1)
    return 0;
  return threads;
}

}  // namespace

std::expected<PreparedSandboxPtr, SetupError> prepareSandbox() {
  // The helper may allocate only because nothing else runs in this process when it is forked;
  // called later, say so by preparing nothing (runSandboxed then clones init itself).
  if (threadCount() != 1) return PreparedSandboxPtr{};
  PreparedSandboxPtr p(new PreparedSandbox);
  p->user_namespace = ::geteuid() != 0;
  if (auto r = p->pipes.make(); !r) return std::unexpected(r.error());
  Fd plan_r, pid_w;
  if (!makePipe(plan_r, p->plan_w) || !makePipe(p->pid_r, pid_w))
    return std::unexpected(setupError("pipes", std::strerror(errno)));
  // The caller is single-threaded (the contract): a plain fork, and the helper may allocate.
  pid_t pid = ::fork();
  if (pid < 0) return std::unexpected(setupError("fork namespace helper", std::strerror(errno)));
  if (pid == 0)
    detail::prepareMain(plan_r.get(), pid_w.get(), p->pipes.childFds(), p->user_namespace);
  p->helper = pid;
  return p;
}

std::string_view limitHitName(LimitHit l) {
  switch (l) {
    case LimitHit::kNone:
      return "";
    case LimitHit::kTimeout:
      return "timeout";
    case LimitHit::kCpu:
      return "cpu";
    case LimitHit::kMemory:
      return "memory";
    case LimitHit::kPids:
      return "pids";
    case LimitHit::kOutput:
      return "output";
    case LimitHit::kDisk:
      return "disk";
    case LimitHit::kFileSize:
      return "file_size";
  }
  return "";
}

int RunResult::sluiceExitStatus() const {
  if (stopped_by_request) return 128 + stop_signal;
  const bool failed = signal != 0 || exit_code != 0;
  switch (limit_hit) {
    case LimitHit::kTimeout:
    case LimitHit::kCpu:
    case LimitHit::kFileSize:
      return 124;
    case LimitHit::kMemory:
    case LimitHit::kPids:
    case LimitHit::kDisk:
      if (failed) return 124;
      break;
    case LimitHit::kOutput:
    case LimitHit::kNone:
      break;
  }
  if (signal != 0) return 128 + signal;
  return exit_code;
}

int SetupError::exitStatus() const {
  switch (kind) {
    case Kind::kNotFound:
      return 127;
    case Kind::kCannotExec:
      return 126;
    case Kind::kSetup:
      return 125;
  }
  return 125;
}

void installStopHandlers() {
  if (g_stop_pipe[0] < 0 && ::pipe2(g_stop_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return;
  struct sigaction sa {};
  sa.sa_handler = onStopSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
}

void requestStop(int signal) { onStopSignal(signal); }

bool sandboxSupported(std::string* why) {
  if (::geteuid() != 0) {
    if (why) *why = "not root: no cgroups (runSandboxed falls back to a user namespace)";
    return false;
  }
  auto layout = detectCgroupLayout();
  if (!layout) {
    if (why) *why = layout.error();
    return false;
  }
  return true;
}

std::expected<RunResult, SetupError> runSandboxed(
    const RunSpec& spec, const ListenerCallback& on_listener, const OutputSink& live,
    const StartGate& before_start, const ResultCallback& on_result, PreparedSandboxPtr prepared) {
  RunResult result;
  result.started_at = std::chrono::system_clock::now();
  const auto t0 = Clock::now();
  if (spec.argv.empty()) return std::unexpected(setupError("command", "no command given"));
  if (!validExecutionId(spec.execution_id))
    return std::unexpected(
        setupError("execution id", "'" + spec.execution_id + "' must be 1-128 of [A-Za-z0-9._-]"));
  // Not root: a user namespace gives us the capabilities to build the sandbox, but no cgroups
  // (memory and pids are then not enforced by the kernel's cgroup limits; see docs/sandbox.md).
  const bool user_namespace = ::geteuid() != 0;
  std::optional<CgroupLayout> layout;
  if (!user_namespace) {
    auto l = detectCgroupLayout();
    if (!l) return std::unexpected(setupError("cgroup detection", l.error()));
    layout = *l;
    std::error_code ec;
    fs::create_directories(detail::kStageDir, ec);
    if (ec)
      return std::unexpected(
          setupError("staging directory", std::string(detail::kStageDir) + ": " + ec.message()));
  }

  detail::ChildPlan plan;
  if (auto r = buildChildPlan(spec, user_namespace, plan); !r) return std::unexpected(r.error());

  auto mark = [&, last = t0](const char* phase) mutable {
    const auto now = Clock::now();
    result.phases.emplace_back(
        phase, std::chrono::duration_cast<std::chrono::microseconds>(now - last).count());
    last = now;
  };
  mark("runner: plan (mount plan, seccomp, env)");
  // The name carries our pid and start time so `sluice gc` can tell live runs from leftovers.
  std::optional<Cgroup> cg;
  if (layout) {
    auto c = Cgroup::create(*layout, cgroupName(spec.execution_id), spec.limits);
    if (!c) return std::unexpected(c.error());
    cg.emplace(std::move(*c));
  }

  if (prepared && prepared->user_namespace != user_namespace) prepared.reset();  // mismatched
  Pipes pipes;
  if (prepared) {
    pipes = std::move(prepared->pipes);
  } else if (auto r = pipes.make(); !r) {
    return std::unexpected(r.error());
  }
  plan.fds = pipes.childFds();
  Fd &go_w = pipes.go_w, &err_r = pipes.err_r, &rep_r = pipes.rep_r, &ctl_w = pipes.ctl_w,
     &out_r = pipes.out_r, &errs_r = pipes.errs_r, &chan_parent = pipes.chan_parent;
  auto childFailure = [&](const char* fallback_step) -> SetupError {
    detail::ChildMessage m;
    if (::read(err_r.get(), &m, sizeof m) == static_cast<ssize_t>(sizeof m))
      return setupError(std::string(m.step, strnlen(m.step, sizeof m.step)), childMessageText(m));
    return setupError(fallback_step, "the sandbox's init exited during setup");
  };

  mark("runner: cgroup create + pipes");
  const auto t_clone = Clock::now();
  pid_t init = -1;
  bool id_maps_written = false;
  if (prepared) {
    // The helper has built the namespaces meanwhile. Unprivileged: it says when its user
    // namespace exists (pid 0), and its uid/gid maps, which init will share, go in first.
    ssize_t got = sizeof init;
    if (user_namespace) {
      pid_t ready = -1;
      got = ::read(prepared->pid_r.get(), &ready, sizeof ready);
      if (got == static_cast<ssize_t>(sizeof ready) && ready == 0) {
        auto maps = writeIdMaps(prepared->helper, spec.uid, spec.gid);
        if (!maps) {
          prepared->reapHelper(true);
          pipes.closeChildEnds();
          return std::unexpected(maps.error());
        }
        id_maps_written = true;
      } else {
        got = -1;
      }
    }
    // Then the plan, and init's pid back.
    const bool sent = got == static_cast<ssize_t>(sizeof init) &&
                      writeAll(prepared->plan_w.get(), detail::encodePlan(plan));
    prepared->plan_w.reset();
    got = sent ? ::read(prepared->pid_r.get(), &init, sizeof init) : -1;
    prepared->reapHelper(got != static_cast<ssize_t>(sizeof init));
    if (got != static_cast<ssize_t>(sizeof init) || init <= 0) {
      pipes.closeChildEnds();
      if (cg) (void)cg->remove();
      SetupError e = childFailure("prepare namespaces");
      if (user_namespace && e.step == "unshare namespaces")
        e.message += " (not root, and unprivileged user namespaces are unavailable)";
      return std::unexpected(std::move(e));
    }
  } else {
    // Raw clone (fork-like, no new stack): the new pid namespace's first process is our init.
    // The cgroup namespace is unshared by init itself once it sits in its cgroup.
    const unsigned long flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC |
                                CLONE_NEWUTS | SIGCHLD | (user_namespace ? CLONE_NEWUSER : 0);
    init = static_cast<pid_t>(::syscall(SYS_clone, flags, 0, 0, 0, 0));
    if (init < 0)
      return std::unexpected(setupError(
          "clone namespaces",
          std::string(std::strerror(errno)) +
              (user_namespace ? " (not root, and unprivileged user namespaces are unavailable)"
                              : "")));
    if (init == 0) detail::initMain(plan);  // never returns
  }
  pipes.closeChildEnds();

  // From here on every exit path must kill and reap init (which takes the namespace with it).
  auto abort = [&](SetupError e) -> std::unexpected<SetupError> {
    ::kill(init, SIGKILL);
    int st;
    while (::waitpid(init, &st, 0) < 0 && errno == EINTR) {
    }
    if (cg) {
      cg->killAll();
      (void)cg->remove();
    }
    return std::unexpected(std::move(e));
  };
  if (cg) {
    if (auto r = cg->addProcess(init); !r) return abort(r.error());
  } else if (!id_maps_written) {
    if (auto r = writeIdMaps(init, spec.uid, spec.gid); !r) return abort(r.error());
  }
  if (::write(go_w.get(), "G", 1) != 1)
    return abort(setupError("start sandbox", std::strerror(errno)));

  if (spec.network_proxy) {
    int fd = detail::receiveFd(chan_parent.get());
    if (fd < 0) return abort(childFailure("proxy listener"));
    if (on_listener) {
      auto r = on_listener(fd);
      if (!r) return abort(setupError("proxy listener", r.error()));
    } else {
      ::close(fd);  // no proxy attached: connections are refused once the backlog closes
    }
  }
  chan_parent.reset();
  if (before_start) {
    if (auto r = before_start(); !r) return abort(r.error());
  }
  // 'A': everything outside the sandbox is ready (proxy listener adopted, gate passed).
  if (::write(go_w.get(), "A", 1) != 1)
    return abort(setupError("start sandbox", std::strerror(errno)));
  mark("runner: clone + cgroup attach + listener hand-off");

  // Relay loop.
  enum class Stop { kNone, kTimeout, kCpu, kRequest };
  Stop stop = Stop::kNone;
  // time_point::max() means "not armed" (std::optional trips GCC 12's maybe-uninitialized).
  constexpr auto kNever = Clock::time_point::max();
  auto kill_deadline = kNever;
  const auto deadline = spec.limits.timeout.count() > 0 ? t_clone + spec.limits.timeout : kNever;
  const std::uint64_t cpu_limit_us =
      static_cast<std::uint64_t>(spec.limits.cpu_time.count()) * 1000;
  bool out_open = true, err_open = true, errpipe_open = true, report_open = true;
  bool have_report = false;
  detail::InitReport report;
  std::optional<SetupError> child_error;
  std::uint64_t pids_sampled = 0;
  auto next_sample = Clock::now() + 50ms;

  auto beginStop = [&](Stop why) {
    if (stop != Stop::kNone) return;
    stop = why;
    // init's handler SIGKILLs every other process of the namespace; the normal path then
    // reports. If init itself is wedged, SIGKILL it after a grace period.
    ::kill(init, SIGUSR1);
    kill_deadline = Clock::now() + 2s;
  };

  while (out_open || err_open || report_open) {
    pollfd pfds[5];
    int n = 0;
    int i_out = -1, i_err = -1, i_ep = -1, i_rep = -1, i_stop = -1;
    if (out_open) pfds[i_out = n++] = {out_r.get(), POLLIN, 0};
    if (err_open) pfds[i_err = n++] = {errs_r.get(), POLLIN, 0};
    if (errpipe_open) pfds[i_ep = n++] = {err_r.get(), POLLIN, 0};
    if (report_open) pfds[i_rep = n++] = {rep_r.get(), POLLIN, 0};
    if (g_stop_pipe[0] >= 0) pfds[i_stop = n++] = {g_stop_pipe[0], POLLIN, 0};

    const auto now = Clock::now();
    auto wake = next_sample;
    if (deadline < wake) wake = deadline;
    if (kill_deadline < wake) wake = kill_deadline;
    const int timeout_ms = static_cast<int>(std::max<std::int64_t>(
        0, std::chrono::ceil<std::chrono::milliseconds>(wake - now).count()));
    int rc = ::poll(pfds, static_cast<nfds_t>(n), timeout_ms);
    if (rc < 0 && errno != EINTR) break;

    if (rc > 0) {
      if (i_out >= 0 && pfds[i_out].revents)
        drainStream(out_r.get(), result.out, spec.limits.output, 1, live, out_open);
      if (i_err >= 0 && pfds[i_err].revents)
        drainStream(errs_r.get(), result.err, spec.limits.output, 2, live, err_open);
      if (i_ep >= 0 && pfds[i_ep].revents) {
        detail::ChildMessage m;
        ssize_t got = ::read(err_r.get(), &m, sizeof m);
        if (got == static_cast<ssize_t>(sizeof m)) {
          SetupError e =
              setupError(std::string(m.step, strnlen(m.step, sizeof m.step)), childMessageText(m));
          if (m.kind == detail::ChildMessage::kExecFailed) {
            e.kind = m.err == ENOENT ? SetupError::Kind::kNotFound : SetupError::Kind::kCannotExec;
            e.message = spec.argv[0] + ": " + std::strerror(m.err);
          }
          child_error = std::move(e);
        } else if (got <= 0 && !(got < 0 && errno == EINTR)) {
          errpipe_open = false;  // the program exec'd (or is gone)
          mark("runner: sandbox setup until execve");
        }
      }
      if (i_rep >= 0 && pfds[i_rep].revents) {
        ssize_t got = ::read(rep_r.get(), &report, sizeof report);
        if (got == static_cast<ssize_t>(sizeof report)) have_report = true;
        if (got == static_cast<ssize_t>(sizeof report) || got == 0 || (got < 0 && errno != EINTR))
          report_open = false;
      }
      if (i_stop >= 0 && pfds[i_stop].revents) {
        char buf[16];
        while (::read(g_stop_pipe[0], buf, sizeof buf) > 0) {
        }
        if (g_stop_signal.load() != 0) {
          result.stopped_by_request = true;
          result.stop_signal = g_stop_signal.load();
          beginStop(Stop::kRequest);
        }
      }
    }
    const auto t = Clock::now();
    if (t >= deadline && report_open) beginStop(Stop::kTimeout);
    if (t >= kill_deadline) {
      ::kill(init, SIGKILL);
      kill_deadline = kNever;
    }
    if (t >= next_sample) {
      next_sample = t + 100ms;
      CgroupStats s = cg ? cg->stats() : CgroupStats{};
      pids_sampled = std::max(pids_sampled, s.pids_current);
      if (cpu_limit_us > 0 && s.cpu_usage_us > cpu_limit_us && report_open) beginStop(Stop::kCpu);
    }
    // Once init has reported, every process is dead: the output pipes hit EOF immediately.
  }

  mark("runner: program run + reap");
  // Artifacts and disk usage: read through init's root while its mount namespace lives.
  bool disk_full = false;
  if (have_report && !child_error) {
    const fs::path root = "/proc/" + std::to_string(init) + "/root";
    struct statvfs sv {};
    if (::statvfs((root / "work").c_str(), &sv) == 0)
      disk_full =
          static_cast<std::uint64_t>(sv.f_bavail) * sv.f_frsize < (64u << 10) || sv.f_favail == 0;
    auto arts = detail::collectArtifacts(root / "output", spec.output_dir, spec.limits.disk);
    if (!arts) return abort(setupError("copy /output", arts.error()));
    result.artifacts = std::move(arts->files);
    result.artifacts_truncated = arts->truncated;
  }
  // The kernel's counters now (init, the only process left, idles on the control pipe); the
  // result is then final before the teardown, so the caller may start committing it.
  const CgroupStats stats = cg ? cg->stats() : CgroupStats{};
  auto teardown = [&] {
    ctl_w.reset();  // init exits, and with it the namespaces and every mount
    int init_status = 0;
    while (::waitpid(init, &init_status, 0) < 0 && errno == EINTR) {
    }
    if (cg) {
      cg->killAll();
      if (auto r = cg->remove(); !r) logger()->warn("cgroup cleanup: {}", r.error());
    }
  };

  // Init gone without a report while the cgroup counted an OOM kill: it was killed with the
  // program, where it cannot exempt itself from the OOM killer (no CAP_SYS_RESOURCE) or by
  // cgroup v2's memory.oom.group. That is the memory limit at work, not a failed setup; the
  // program's own status is lost with init, so it is reported as killed by SIGKILL.
  if (!child_error && !have_report && stop != Stop::kRequest && stats.oom_kills > 0) {
    report = detail::InitReport{};
    report.wait_status = SIGKILL;  // as waitpid reports "killed by signal 9"
    report.program_started = 1;
    have_report = true;
  }
  if (child_error || !have_report) {
    teardown();
    if (child_error) return std::unexpected(*child_error);
    if (stop == Stop::kRequest)
      return std::unexpected(setupError("stopped", "sluice was asked to stop during setup"));
    return std::unexpected(setupError("sandbox init", "the sandbox's init died without a report"));
  }

  mark("runner: artifacts + counters");
  result.ended_at = std::chrono::system_clock::now();
  const int ws = report.wait_status;
  if (WIFEXITED(ws)) result.exit_code = WEXITSTATUS(ws);
  if (WIFSIGNALED(ws)) result.signal = WTERMSIG(ws);
  const rusage& ru = report.children;
  result.usage.cpu_user_ms = static_cast<std::uint64_t>(ru.ru_utime.tv_sec) * 1000 +
                             static_cast<std::uint64_t>(ru.ru_utime.tv_usec) / 1000;
  result.usage.cpu_sys_ms = static_cast<std::uint64_t>(ru.ru_stime.tv_sec) * 1000 +
                            static_cast<std::uint64_t>(ru.ru_stime.tv_usec) / 1000;
  result.usage.max_rss_bytes = static_cast<std::uint64_t>(ru.ru_maxrss) * 1024;
  result.usage.pids_peak = std::max<std::uint64_t>({stats.pids_peak, pids_sampled, 1});

  // Which limit: from our own timer, then the kernel's counters and the killing signal.
  const std::uint64_t cpu_used_us = std::max<std::uint64_t>(
      stats.cpu_usage_us, (result.usage.cpu_user_ms + result.usage.cpu_sys_ms) * 1000);
  if (stop == Stop::kTimeout)
    result.limit_hit = LimitHit::kTimeout;
  else if (stop == Stop::kCpu || result.signal == SIGXCPU ||
           (result.signal == SIGKILL && cpu_limit_us > 0 && cpu_used_us >= cpu_limit_us))
    result.limit_hit = LimitHit::kCpu;
  else if (stats.oom_kills > 0)
    result.limit_hit = LimitHit::kMemory;
  else if (result.signal == SIGXFSZ)
    result.limit_hit = LimitHit::kFileSize;
  else if (stats.pids_max_events > 0)
    result.limit_hit = LimitHit::kPids;
  else if (disk_full)
    result.limit_hit = LimitHit::kDisk;
  else if (result.out.truncated || result.err.truncated)
    result.limit_hit = LimitHit::kOutput;

  result.isolation.namespaces = {"mount", "pid", "net", "ipc", "uts", "cgroup"};
  if (user_namespace) result.isolation.namespaces.push_back("user");
  result.isolation.seccomp = true;
  result.isolation.landlock = plan.privileges.landlock_abi > 0;
  result.isolation.no_new_privs = true;
  result.isolation.uid = spec.uid;
  result.isolation.gid = spec.gid;
  result.isolation.cgroup = !layout ? "none" : layout->version == CgroupVersion::kV2 ? "v2" : "v1";
  if (on_result) on_result(result);
  teardown();
  mark("runner: teardown (namespaces, cgroups)");
  logger()->debug("run {}: setup+run {} ms", spec.execution_id,
                  std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count());
  return result;
}

}  // namespace sluice::runner
