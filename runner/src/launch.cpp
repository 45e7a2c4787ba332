// Launching a sandbox (see launch.hpp): plan, cgroup, pipes, init, hand-over.
#include "launch.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <optional>

#include "namespaces.hpp"
#include "plan_codec.hpp"
#include "proc_stat.hpp"
#include "sandbox_paths.hpp"
#include "seccomp.hpp"
#include "sluice/runner/environment.hpp"
#include "transparent.hpp"

namespace sluice::runner {

void PreparedSandboxDeleter::operator()(PreparedSandbox* p) const { delete p; }

namespace detail {
namespace {

namespace fs = std::filesystem;

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
  static const int abi = landlockAbi();
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

std::string childMessageText(const ChildMessage& m) {
  std::string step(m.step, strnlen(m.step, sizeof m.step));
  return step + ": " + std::strerror(m.err);
}

// The per-process limits: CPU seconds, file size, open files, core dumps; processes too when
// there is no cgroup.
void planRlimits(const Limits& l, bool user_namespace, PrivilegePlan& p) {
  auto add = [&](int res, rlim_t soft, rlim_t hard) {
    p.rlimits[p.rlimit_count++] = {res, rlimit{soft, hard}};
  };
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
}

// Fields 48 and 49 of /proc/self/stat: where our argv strings live (the child's copy of this
// memory is what its /proc/PID/cmdline shows, and init overwrites it).
void findOwnArgv(ChildPlan& plan) {
  const ProcStat stat;
  const auto start = stat.field(48), end = stat.field(49);
  if (start && end && *start != 0 && *end > *start) {
    plan.arg_start = reinterpret_cast<char*>(static_cast<std::uintptr_t>(*start));
    plan.arg_len = static_cast<std::size_t>(*end - *start);
  }
}

// User-namespace mode: the sandbox uid/gid map to the caller's own (the only mapping an
// unprivileged process may write); setgroups must be denied first.
base::Result<void> writeIdMaps(pid_t pid, uid_t uid, gid_t gid) {
  const std::string base = "/proc/" + std::to_string(pid) + "/";
  auto put = [&](const std::string& file, const std::string& text) -> base::Result<void> {
    Fd fd(::open((base + file).c_str(), O_WRONLY | O_CLOEXEC));
    if (!fd) return std::unexpected(setupError("user namespace " + file, std::strerror(errno)));
    if (::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()))
      return std::unexpected(setupError("user namespace " + file, std::strerror(errno)));
    return {};
  };
  if (auto r = put("setgroups", "deny"); !r) return r;
  if (auto r = put("uid_map", std::to_string(uid) + " " + std::to_string(::geteuid()) + " 1"); !r)
    return r;
  return put("gid_map", std::to_string(gid) + " " + std::to_string(::getegid()) + " 1");
}

// The prepared path, first half: the helper has built the namespaces meanwhile. Unprivileged,
// it says when its user namespace exists (pid 0), and its uid/gid maps, which init will share,
// go in first. Then the plan goes to it. Returns whether it went (awaitInit finds out why not).
base::Result<bool> sendPlan(const RunSpec& spec, const ChildPlan& plan, PreparedSandboxState& prep,
                            Launched& l, bool& id_maps_written) {
  l.pipes.closeChildEnds();  // the helper has its copies; EOF on the error pipe if it dies
  bool ready = true;
  if (l.user_namespace) {
    pid_t said = -1;
    ready = ::read(prep.pid_r.get(), &said, sizeof said) == static_cast<ssize_t>(sizeof said) &&
            said == 0;
    if (ready) {
      if (auto maps = writeIdMaps(prep.helper, spec.uid, spec.gid); !maps) {
        prep.reapHelper(true);
        return std::unexpected(maps.error());
      }
      id_maps_written = true;
    }
  }
  const bool sent = ready && writeAll(prep.plan_w.get(), encodePlan(plan));
  prep.plan_w.reset();
  return sent;
}

// The prepared path, second half: init's pid comes back, and the helper has exited.
base::Result<void> awaitInit(PreparedSandboxState& prep, Launched& l, bool sent) {
  pid_t init = -1;
  const ssize_t got = sent ? ::read(prep.pid_r.get(), &init, sizeof init) : -1;
  prep.reapHelper(got != static_cast<ssize_t>(sizeof init));
  if (got != static_cast<ssize_t>(sizeof init) || init <= 0) {
    base::Error e = l.childFailure("prepare namespaces");
    if (l.user_namespace && e.where == "unshare namespaces")
      e.message += " (not root, and unprivileged user namespaces are unavailable)";
    return std::unexpected(std::move(e));
  }
  l.init = init;
  return {};
}

// Without a prepared sandbox: a raw clone (fork-like, no new stack) whose child, the first
// process of the new pid namespace, is init. The cgroup namespace is unshared by init itself
// once it sits in its cgroup.
base::Result<void> cloneInit(const ChildPlan& plan, Launched& l) {
  const unsigned long flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC |
                              CLONE_NEWUTS | SIGCHLD | (l.user_namespace ? CLONE_NEWUSER : 0);
  const pid_t init = static_cast<pid_t>(::syscall(SYS_clone, flags, 0, 0, 0, 0));
  if (init < 0)
    return std::unexpected(setupError(
        "clone namespaces",
        std::string(std::strerror(errno)) +
            (l.user_namespace ? " (not root, and unprivileged user namespaces are unavailable)"
                              : "")));
  if (init == 0) initMain(plan);  // never returns
  l.init = init;
  return {};
}

void warnNoTransparentCapture() {
  static std::once_flag once;
  std::call_once(once, [] {
    runnerLog().warn(
        "not root: no transparent capture in the sandbox (only programs that use the proxy "
        "variables reach the network), no DNS sockets");
  });
}

bool readable(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & (POLLIN | POLLHUP | POLLERR)) != 0;
}

// The sockets of the sandbox's network to the caller: init's IPv4 proxy listener, the IPv6
// one and the DNS sockets of transparent capture (`capture`: null without it). A socket no hook
// takes is closed: connections to it are refused.
base::Result<void> handSockets(const RunHooks& hooks, Fd listener4, CaptureSockets* capture) {
  Fd listeners[] = {std::move(listener4), capture ? std::move(capture->listener6) : Fd()};
  for (Fd& fd : listeners)
    if (fd && hooks.on_listener)
      if (auto r = hooks.on_listener(fd.release()); !r)
        return std::unexpected(setupError("proxy listener", r.error()));
  if (capture && capture->dns_udp && capture->dns_tcp && capture->blocked_log && hooks.on_dns)
    if (auto r = hooks.on_dns(capture->dns_udp.release(), capture->dns_tcp.release(),
                              capture->blocked_log.release());
        !r)
      return std::unexpected(setupError("dns sockets", r.error()));
  return {};
}

// Cgroup v1: init moves itself in (child.cpp, awaitCgroup): the `tasks` file of each
// hierarchy, opened here, goes to it over the channel; it reads 'C' instead of 'G' next.
base::Result<void> sendCgroupFiles(const Cgroup& cgroup, const Launched& l) {
  std::vector<Fd> files;
  std::vector<int> raw;
  for (const fs::path& dir : cgroup.dirs()) {
    files.emplace_back(::open((dir / "tasks").c_str(), O_WRONLY | O_CLOEXEC));
    if (!files.back()) return std::unexpected(setupError("cgroup tasks", std::strerror(errno)));
    raw.push_back(files.back().get());
  }
  const char tag = 'C';
  if (sendWithFds(l.pipes.chan_parent.get(), &tag, 1, raw.data(), static_cast<int>(raw.size())) !=
      1)
    return std::unexpected(l.childFailure("start sandbox"));
  return {};
}

// Init is running: into the cgroup (v1: 'C', init joins it itself; v2: our write, then 'G') or
// its uid/gid maps and 'G', the proxy listeners and DNS sockets to the caller once transparent
// capture is set up, the start gate, then 'A'. Any failure leaves `l` to kill init.
base::Result<void> handOver(const RunSpec& spec, const RunHooks& hooks, Launched& l,
                            bool id_maps_written, std::future<CaptureResult>& capture,
                            PhaseClock& clock) {
  char go = 'G';
  if (l.cgroup && l.cgroup->version() == CgroupVersion::kV1) {
    if (auto r = sendCgroupFiles(*l.cgroup, l); !r) return r;
    go = 'C';
  } else if (l.cgroup) {
    if (auto r = l.cgroup->addProcess(l.init); !r) return std::unexpected(r.error());
  } else if (!id_maps_written) {
    if (auto r = writeIdMaps(l.init, spec.uid, spec.gid); !r) return r;
  }
  // Init gone before it read 'G' (EPIPE): it failed a setup step and said which.
  if (writeWithoutSigpipe(l.pipes.go_w.get(), &go, 1) != 1)
    return std::unexpected(l.childFailure("start sandbox"));
  if (spec.network_proxy) {
    Fd listener4(receiveFd(l.pipes.chan_parent.get()));
    if (!listener4) return std::unexpected(l.childFailure("proxy listener"));
    std::optional<CaptureResult> captured;
    if (capture.valid()) {
      const auto waited = Clock::now();
      captured.emplace(capture.get());
      if (!*captured) return std::unexpected(captured->error());
      clock.add("runner: (during clone) transparent capture: routes, nft rules, sockets",
                (*captured)->took_us);
      clock.add(
          "runner: (in hand-off) waiting for transparent capture",
          std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - waited).count());
    }
    if (auto r = handSockets(hooks, std::move(listener4), captured ? &**captured : nullptr); !r)
      return r;
  }
  if (hooks.before_start)
    if (auto r = hooks.before_start(); !r) return std::unexpected(r.error());
  if (readable(hooks.stop_fd))
    return std::unexpected(setupError("stopped", "the run was stopped before its program started"));
  // 'A': everything outside the sandbox is ready (proxy listener adopted, gate passed).
  if (writeWithoutSigpipe(l.pipes.go_w.get(), "A", 1) != 1)
    return std::unexpected(l.childFailure("start sandbox"));
  return {};
}

// Where transparent capture is started once the helper's network namespace is in hand.
struct CaptureStart {
  bool transparent = false;
  bool dns = false;
  std::future<CaptureResult>* capture = nullptr;
};

// The helper's network namespace ('N' on `channel`: root only, sent right after its unshare
// and before it reads the plan, so before anything init sends): transparent capture is set up
// there, on a thread of its own, while the plan is built and init started. Taken when it is
// there (`wait`: waits for it, which the caller does only once its copies of the child-side
// fds are closed, so that a dead helper is an EOF), with or without capture.
void takeHelperNetns(PreparedSandboxState& prep, int channel, bool wait, const CaptureStart& cs) {
  if (prep.user_namespace || prep.netns_taken) return;
  if (!wait && !readable(channel)) return;
  prep.netns_taken = true;
  char tag = 0;
  int fd = -1;
  const Received r = receiveWithFds(channel, &tag, 1, &fd, 1);
  Fd ns(r.fd_count == 1 ? fd : -1);
  if (r.bytes == 1 && tag == 'N' && ns && cs.transparent)
    *cs.capture = startCaptureIn(std::move(ns), cs.dns);
}

// The name carries our pid and start time so `sluice gc` can tell live runs from leftovers.
base::Result<void> makeCgroup(const RunSpec& spec, Launched& l) {
  if (!l.layout) return {};
  auto c = Cgroup::create(*l.layout, cgroupName(spec.execution_id), spec.limits);
  if (!c) return std::unexpected(c.error());
  l.cgroup.emplace(std::move(*c));
  return {};
}

// Init started: the plan to a prepared sandbox's helper, or init cloned here. Its cgroup is made
// meanwhile, while the helper forks init and init builds its mounts: init joins it only after
// them (handOver). The helper's network namespace is taken only then: the plan never waits for
// it. A failure once init runs leaves `l` to kill it.
base::Result<void> startInit(const RunSpec& spec, const ChildPlan& plan, PreparedSandboxState* prep,
                             Launched& l, bool& id_maps_written, const CaptureStart& cs) {
  base::Result<bool> sent = true;
  if (prep) {
    sent = sendPlan(spec, plan, *prep, l, id_maps_written);
    if (!sent) return std::unexpected(sent.error());
    // Looked for again once the plan is on its way (the plan's 0.2-2 ms usually see 'N'
    // arrive): capture's nftables commit, mostly the kernel enabling its netfilter hooks with
    // IPIs when no other namespace holds them, then overlaps the cgroup and init's mounts. Not
    // before the plan: the thread's start would delay the helper's, which leads when the
    // commit is cheap.
    takeHelperNetns(*prep, l.pipes.chan_parent.get(), false, cs);
  } else if (auto r = cloneInit(plan, l); !r) {
    return r;
  }
  const base::Result<void> cgroup = *sent ? makeCgroup(spec, l) : base::Result<void>{};
  if (prep) {
    takeHelperNetns(*prep, l.pipes.chan_parent.get(), true, cs);  // child ends closed: sendPlan
    if (auto r = awaitInit(*prep, l, *sent); !r) return r;
  }
  return cgroup;
}

// Before planning: root needs a cgroup hierarchy and the staging directory.
base::Result<void> prepareHost(Launched& l) {
  // Not root: a user namespace gives us the capabilities to build the sandbox, but no cgroups
  // (memory and pids are then not enforced by the kernel's cgroup limits; see docs/sandbox.md).
  l.user_namespace = ::geteuid() != 0;
  if (l.user_namespace) return {};
  auto layout = detectCgroupLayout();
  if (!layout) return std::unexpected(setupError("cgroup detection", layout.error()));
  l.layout = *layout;
  std::error_code ec;
  fs::create_directories(kStageDir, ec);
  if (ec)
    return std::unexpected(
        setupError("staging directory", std::string(kStageDir) + ": " + ec.message()));
  return {};
}

}  // namespace

long threadCount() { return static_cast<long>(ProcStat().field(20).value_or(0)); }

base::Error setupError(std::string step, std::string message) {
  return base::Error{base::Code::kIo, std::move(message), std::move(step)};
}

void PhaseClock::markAt(const char* phase, Clock::time_point t) {
  out_->emplace_back(phase,
                     std::chrono::duration_cast<std::chrono::microseconds>(t - last_).count());
  last_ = t;
}

base::Result<void> Pipes::make() {
  if (!makePipe(go_r, go_w) || !makePipe(err_r, err_w) || !makePipe(rep_r, rep_w) ||
      !makePipe(ctl_r, ctl_w) || !makePipe(out_r, out_w) || !makePipe(errs_r, errs_w) ||
      !makePipe(in_r, in_w))
    return std::unexpected(setupError("pipes", std::strerror(errno)));
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
    return std::unexpected(setupError("socketpair", std::strerror(errno)));
  chan_parent.reset(sv[0]);
  chan_child.reset(sv[1]);
  return {};
}

ChildFds Pipes::childFds() const {
  return {go_r.get(),       err_w.get(), rep_w.get(),  ctl_r.get(),
          chan_child.get(), out_w.get(), errs_w.get(), in_r.get()};
}

void Pipes::closeChildEnds() {
  for (Fd* fd : {&go_r, &err_w, &rep_w, &ctl_r, &chan_child, &out_w, &errs_w, &in_r}) fd->reset();
}

void PreparedSandboxState::reapHelper(bool kill) {
  if (helper <= 0) return;
  if (kill) ::kill(helper, SIGKILL);
  int st;
  while (::waitpid(helper, &st, 0) < 0 && errno == EINTR) {
  }
  helper = -1;
}

void Launched::kill() {
  if (init > 0) {
    ::kill(init, SIGKILL);
    int st;
    while (::waitpid(init, &st, 0) < 0 && errno == EINTR) {
    }
    init = -1;
  }
  if (cgroup) {
    cgroup->killAll();
    (void)cgroup->remove();
    cgroup.reset();
  }
}

void Launched::releaseInit() {
  pipes.ctl_w.reset();  // init exits, and with it the namespaces and every mount
  pipes.chan_parent.reset();
}

void Launched::teardown() {
  releaseInit();
  int st = 0;
  while (init > 0 && ::waitpid(init, &st, 0) < 0 && errno == EINTR) {
  }
  init = -1;
  // No killAll() first: init was pid 1 of the sandbox's pid namespace, and the kernel reaps
  // every other process of it before init's exit is reported, so nothing is left in the
  // cgroup. remove() still kills whatever it finds should a directory be busy.
  if (cgroup) {
    if (auto r = cgroup->remove(); !r) runnerLog().warn("cgroup cleanup: {}", r.error());
    cgroup.reset();
  }
}

base::Error Launched::childFailure(const char* fallback_step) const {
  ChildMessage m;
  if (::read(pipes.err_r.get(), &m, sizeof m) == static_cast<ssize_t>(sizeof m))
    return setupError(std::string(m.step, strnlen(m.step, sizeof m.step)), childMessageText(m));
  return setupError(fallback_step, "the sandbox's init exited during setup");
}

base::Result<void> validateRunSpec(const RunSpec& spec) {
  if (spec.argv.empty()) return std::unexpected(setupError("command", "no command given"));
  if (!validExecutionId(spec.execution_id))
    return std::unexpected(
        setupError("execution id", "'" + spec.execution_id + "' must be 1-128 of [A-Za-z0-9._-]"));
  return {};
}

base::Result<void> buildChildPlan(const RunSpec& spec, bool user_namespace, ChildPlan& plan) {
  auto mounts = buildMountPlan(spec, user_namespace);
  if (!mounts) return std::unexpected(mounts.error());
  plan.mounts = std::move(*mounts);
  if (auto r = planSandboxFiles(spec.files, plan.mounts); !r) return r;
  plan.seccomp = precompiledSeccompProgram();
  auto env = buildEnvironment(spec.env, spec.network_proxy);
  if (!env) return std::unexpected(setupError("environment", env.error()));
  plan.env_storage = std::move(*env);
  plan.argv_storage = spec.argv;
  for (std::string& s : plan.argv_storage) plan.argv.push_back(s.data());
  plan.argv.push_back(nullptr);
  for (std::string& s : plan.env_storage) plan.envp.push_back(s.data());
  plan.envp.push_back(nullptr);
  const std::string path = kSandboxPath;
  for (size_t start = 0; start <= path.size();) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    plan.path_dirs.push_back(path.substr(start, end - start));
    start = end + 1;
  }
  PrivilegePlan& p = plan.privileges;
  p.uid = spec.uid;
  p.gid = spec.gid;
  p.cap_last = capLastCap();
  p.landlock_abi = cachedLandlockAbi();
  p.user_namespace = user_namespace;
  planRlimits(spec.limits, user_namespace, p);
  plan.network_proxy = spec.network_proxy;
  plan.stdin_pipe = !spec.stdin_data.empty();
  plan.user_namespace = user_namespace;
  findOwnArgv(plan);
  return {};
}

base::Result<std::unique_ptr<Launched>> launchSandbox(const RunSpec& spec, const RunHooks& hooks,
                                                      PreparedSandboxPtr prepared,
                                                      PhaseClock& clock, bool session) {
  if (auto r = validateRunSpec(spec); !r) return std::unexpected(r.error());
  auto l = std::make_unique<Launched>();
  if (auto r = prepareHost(*l); !r) return std::unexpected(r.error());
  if (prepared && prepared->user_namespace != l->user_namespace) prepared.reset();  // mismatched
  // Transparent capture is set up on a thread of its own (transparent.hpp): in a prepared
  // sandbox's namespace as soon as its helper sent it, else in init's once it exists.
  // Unprivileged, sluice cannot join the namespace (setns needs CAP_SYS_ADMIN in its own user
  // namespace).
  const bool transparent = spec.network_proxy && !l->user_namespace;
  const bool dns = static_cast<bool>(hooks.on_dns);
  if (spec.network_proxy && l->user_namespace) warnNoTransparentCapture();
  std::future<CaptureResult> capture;
  const CaptureStart cs{transparent, dns, &capture};
  if (prepared) takeHelperNetns(*prepared, prepared->pipes.chan_parent.get(), false, cs);
  ChildPlan plan;
  if (auto r = buildChildPlan(spec, l->user_namespace, plan); !r) return std::unexpected(r.error());
  plan.session = session;
  l->landlock_abi = plan.privileges.landlock_abi;
  clock.mark("runner: plan (mount plan, seccomp, env)");
  if (prepared)
    l->pipes = std::move(prepared->pipes);
  else if (auto r = l->pipes.make(); !r)
    return std::unexpected(r.error());
  plan.fds = l->pipes.childFds();
  clock.mark("runner: pipes");

  l->cloned_at = Clock::now();
  bool id_maps_written = false;
  auto started = startInit(spec, plan, prepared.get(), *l, id_maps_written, cs);
  l->pipes.closeChildEnds();
  if (!started) return std::unexpected(started.error());
  if (transparent && !capture.valid()) capture = startCapture(l->init, dns);
  // Without stdin data the program reads /dev/null; else sluice feeds the pipe without
  // blocking (supervise.cpp).
  if (spec.stdin_data.empty())
    l->pipes.in_w.reset();
  else
    ::fcntl(l->pipes.in_w.get(), F_SETFL, O_NONBLOCK);
  if (auto r = handOver(spec, hooks, *l, id_maps_written, capture, clock); !r)
    return std::unexpected(r.error());
  if (!session) l->pipes.chan_parent.reset();
  clock.mark("runner: clone + cgroup create + attach + listener hand-off");
  return l;
}

base::Result<PreparedSandboxPtr> newPreparedSandbox(Fd& plan_r, Fd& pid_w) {
  PreparedSandboxPtr p(new PreparedSandbox);
  p->user_namespace = ::geteuid() != 0;
  if (auto r = p->pipes.make(); !r) return std::unexpected(r.error());
  if (!makePipe(plan_r, p->plan_w) || !makePipe(p->pid_r, pid_w))
    return std::unexpected(setupError("pipes", std::strerror(errno)));
  return p;
}

}  // namespace detail

base::Result<PreparedSandboxPtr> prepareSandbox() {
  // The helper may allocate only because nothing else runs in this process when it is forked;
  // called later, say so by preparing nothing (runSandboxed then clones init itself).
  if (detail::threadCount() != 1) return PreparedSandboxPtr{};
  detail::Fd plan_r, pid_w;
  auto made = detail::newPreparedSandbox(plan_r, pid_w);
  if (!made) return std::unexpected(made.error());
  PreparedSandboxPtr p = std::move(*made);
  // The caller is single-threaded (the contract): a plain fork, and the helper may allocate.
  const pid_t pid = ::fork();
  if (pid < 0)
    return std::unexpected(detail::setupError("fork namespace helper", std::strerror(errno)));
  if (pid == 0)
    detail::prepareMain(plan_r.get(), pid_w.get(), p->pipes.childFds(), p->user_namespace);
  p->helper = pid;
  return p;
}

}  // namespace sluice::runner
