// Session sandboxes, the parent's side (see session.hpp). The session's sandbox is built like a
// run's (launch.cpp) but its init stays idle and serves execs (session_init.cpp): each exec's
// argv, environment and working directory travel in a memfd and its pipes as fds over the
// control socket; the exec is then supervised like a run (supervise.cpp) and its outcome made
// from its own report and the growth of the session cgroup's counters (outcome.cpp). File
// operations go through session_files.cpp.
#include "sluice/runner/session.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <future>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "artifacts.hpp"
#include "exec_request.hpp"
#include "launch.hpp"
#include "namespaces.hpp"
#include "outcome.hpp"
#include "session_files.hpp"
#include "sluice/runner/environment.hpp"
#include "supervise.hpp"

namespace sluice::runner {

namespace {

using detail::Fd;
using detail::setupError;

base::Error sessionError(std::string message) { return setupError("session", std::move(message)); }

// The sandbox of a session is that of a run whose program never starts.
RunSpec runSpecOf(const SessionSpec& s) {
  RunSpec r;
  r.argv = {"sluice-session"};
  r.env = s.env;
  r.limits = s.limits;
  r.network_proxy = s.network_proxy;
  r.inputs = s.inputs;
  r.mounts = s.mounts;
  r.extra_files = s.extra_files;
  r.execution_id = s.session_id;
  r.uid = s.uid;
  r.gid = s.gid;
  return r;
}

// Init says 'R' on the report pipe once it serves; a setup failure comes on the error pipe.
base::Result<void> waitUntilServing(detail::Launched& l) {
  char c = 0;
  ssize_t n;
  do n = ::read(l.pipes.rep_r.get(), &c, 1);
  while (n < 0 && errno == EINTR);
  if (n == 1 && c == 'R') return {};
  return std::unexpected(l.childFailure("session init"));
}

// The session's environment with the exec's added; a name in both: the exec's value.
base::Result<std::vector<std::string>> execEnvironment(const SessionSpec& s, const ExecSpec& e) {
  std::set<std::string> names;
  for (const std::string& kv : e.env) names.insert(kv.substr(0, kv.find('=')));
  std::vector<std::string> merged;
  for (const std::string& kv : s.env)
    if (!names.contains(kv.substr(0, kv.find('=')))) merged.push_back(kv);
  merged.insert(merged.end(), e.env.begin(), e.env.end());
  auto env = buildEnvironment(merged, s.network_proxy);
  if (!env) return std::unexpected(setupError("environment", env.error()));
  return *env;
}

base::Result<void> checkExecSpec(const ExecSpec& e) {
  RunSpec probe;
  probe.argv = e.argv;
  probe.execution_id = e.execution_id.empty() ? "exec" : e.execution_id;
  if (auto r = detail::validateRunSpec(probe); !r) return r;
  if (!e.cwd.starts_with('/') || e.cwd.find('\0') != std::string::npos || e.cwd.size() > 4096)
    return std::unexpected(setupError("working directory", "'" + e.cwd + "' is not absolute"));
  for (const std::string& a : e.argv)
    if (a.find('\0') != std::string::npos)
      return std::unexpected(setupError("command", "an argument holds a NUL byte"));
  return {};
}

// The exec's side of the pipes, kept by sluice while it runs, and its blob: inline (sent after
// the request's header) when it fits, else in a memfd.
struct ExecPipes {
  std::string inline_blob;
  Fd blob, out_r, out_w, errs_r, errs_w, err_r, err_w, rep_r, rep_w, in_r, in_w;
};

base::Result<ExecPipes> makeExecPipes(std::string blob, bool with_stdin) {
  ExecPipes p;
  if (blob.size() <= detail::kExecInlineMax) {
    p.inline_blob = std::move(blob);
  } else {
    p.blob.reset(::memfd_create("sluice-exec", MFD_CLOEXEC));
    if (!p.blob || !detail::writeAll(p.blob.get(), blob))
      return std::unexpected(setupError("exec request", std::strerror(errno)));
  }
  if (!detail::makePipe(p.out_r, p.out_w) || !detail::makePipe(p.errs_r, p.errs_w) ||
      !detail::makePipe(p.err_r, p.err_w) || !detail::makePipe(p.rep_r, p.rep_w) ||
      (with_stdin && !detail::makePipe(p.in_r, p.in_w)))
    return std::unexpected(setupError("pipes", std::strerror(errno)));
  if (with_stdin) ::fcntl(p.in_w.get(), F_SETFL, O_NONBLOCK);
  return p;
}

// Hands the exec to init: the request (and the inline blob) and the fds of its side, in
// ExecFd's order (closed here once sent).
base::Result<void> sendExec(int control, ExecPipes& p, int seq) {
  detail::ExecRequest req;
  req.seq = seq;
  std::vector<int> fds = {p.out_w.get(), p.errs_w.get(), p.err_w.get(), p.rep_w.get()};
  if (p.in_r) {
    req.flags |= detail::kExecHasStdin;
    fds.push_back(p.in_r.get());
  }
  if (p.blob) {
    req.flags |= detail::kExecBlobInMemfd;
    fds.push_back(p.blob.get());
  }
  req.blob_bytes = static_cast<std::uint32_t>(p.inline_blob.size());
  std::string message(reinterpret_cast<const char*>(&req), sizeof req);
  message += p.inline_blob;
  const ssize_t n = detail::sendWithFds(control, message.data(), message.size(), fds.data(),
                                        static_cast<int>(fds.size()));
  const int err = errno;
  for (Fd* fd : {&p.blob, &p.out_w, &p.errs_w, &p.err_w, &p.rep_w, &p.in_r}) fd->reset();
  if (n != static_cast<ssize_t>(message.size()))
    return std::unexpected(sessionError(std::string("the session's init is gone: ") +
                                        std::strerror(n < 0 ? err : EPIPE)));
  return {};
}

// Init is woken on the CPU this thread runs on: the exec's chain (init, the program it starts,
// init again, this thread again) then runs where a CPU is awake instead of waking an idle one
// for each step (a halted vCPU takes tens of microseconds to wake). The program itself gets
// init's own CPUs back first thing (ProgramLaunch::cpus). Best effort: a failure changes nothing.
void wakeInitHere(pid_t init) {
  const int cpu = ::sched_getcpu();
  if (cpu < 0 || cpu >= CPU_SETSIZE) return;
  cpu_set_t here;
  CPU_ZERO(&here);
  CPU_SET(cpu, &here);
  (void)::sched_setaffinity(init, sizeof here, &here);
}

// Whether the session's init has exited (without reaping it: end() does).
bool initGone(pid_t init) {
  siginfo_t info{};
  return ::waitid(P_PID, static_cast<id_t>(init), &info, WEXITED | WNOHANG | WNOWAIT) != 0 ||
         info.si_pid == init;
}

}  // namespace

struct SandboxSession::State {
  SessionSpec spec;
  std::unique_ptr<detail::Launched> sandbox;  // init, its cgroup, the control socket
  detail::Fd root;                            // O_PATH fd of the sandbox's "/"
  dev_t scratch_dev = 0;
  detail::Fd work;  // O_PATH fd of the sandbox's /work (scratchFullAt after each exec)
  // Init's parent thread: PR_SET_PDEATHSIG follows the thread that cloned init, so a thread
  // of the session's own does it and lives until end().
  std::thread keeper;
  std::mutex keeper_mu;
  std::condition_variable keeper_cv;
  bool release_keeper = false;

  std::mutex exec_mu;     // one exec at a time
  int exec_seq = 0;       // the last exec's number (under exec_mu)
  mutable std::mutex mu;  // what follows
  bool ended = false;
  std::string broken;  // why the session can no longer run anything ("" while it can)
  Usage totals;
  // The cgroup's counters when the last exec ended (nothing counts between execs: init idles,
  // and what the caller writes is charged to the caller): the next exec's starting point.
  CgroupStats counters;

  base::Result<void> usable() const {
    std::lock_guard lock(mu);
    if (ended) return std::unexpected(sessionError("the session has ended"));
    if (!broken.empty()) return std::unexpected(sessionError(broken));
    return {};
  }
  void breakWith(std::string why) {
    std::lock_guard lock(mu);
    if (broken.empty()) broken = std::move(why);
  }
  void account(const Usage& u) {
    std::lock_guard lock(mu);
    totals.cpu_user_ms += u.cpu_user_ms;
    totals.cpu_sys_ms += u.cpu_sys_ms;
    totals.max_rss_bytes = std::max(totals.max_rss_bytes, u.max_rss_bytes);
    totals.pids_peak = std::max(totals.pids_peak, u.pids_peak);
  }
  // One exec, sent: supervised like a run; `counters` then holds the cgroup's after it.
  detail::Supervised supervise(const ExecSpec& e, const ExecHooks& hooks, ExecPipes& p,
                               detail::Clock::time_point sent, int seq);

  // A file operation's own copy of the root fd: file operations run concurrently with each
  // other, with execs and with end().
  struct Root {
    detail::Fd fd;
    detail::SandboxRoot root;
  };
  std::expected<Root, std::string> rootFor(const std::string& path) {
    std::lock_guard lock(mu);
    if (ended || !this->root) return std::unexpected(path + ": the session has ended");
    Root r{detail::Fd(::fcntl(this->root.get(), F_DUPFD_CLOEXEC, 0)), {}};
    if (!r.fd) return std::unexpected(path + ": " + std::strerror(errno));
    // Unprivileged, the sandbox uid/gid are the caller's own outside the user namespace.
    const bool userns = sandbox && sandbox->user_namespace;
    r.root = detail::SandboxRoot{r.fd.get(), scratch_dev, userns ? ::geteuid() : spec.uid,
                                 userns ? ::getegid() : spec.gid};
    return r;
  }
};

detail::Supervised SandboxSession::State::supervise(const ExecSpec& e, const ExecHooks& hooks,
                                                    ExecPipes& p, detail::Clock::time_point sent,
                                                    int seq) {
  detail::SuperviseSpec sv;
  sv.stop_seq = seq;
  sv.out_r = p.out_r.get();
  sv.errs_r = p.errs_r.get();
  sv.err_r = p.err_r.get();
  sv.rep_r = p.rep_r.get();
  sv.stdin_w = &p.in_w;
  sv.stdin_data = e.stdin_data;
  sv.init = sandbox->init;
  sv.cgroup = sandbox->cgroup ? &*sandbox->cgroup : nullptr;
  sv.cpu_base_us = counters.cpu_usage_us;
  sv.started = sent;
  sv.timeout = e.timeout.value_or(spec.limits.timeout);
  sv.cpu_time = spec.limits.cpu_time;
  sv.output_limit = spec.limits.output;
  sv.live = &hooks.live;
  sv.stop_fd = hooks.stop_fd;
  sv.program = e.argv[0];
  detail::Supervised sup = detail::supervise(sv);
  counters = sandbox->cgroup ? sandbox->cgroup->stats() : CgroupStats{};
  return sup;
}

SandboxSession::SandboxSession(std::unique_ptr<State> state) : s_(std::move(state)) {}

SandboxSession::~SandboxSession() { end(); }

base::Result<std::unique_ptr<SandboxSession>> SandboxSession::start(
    const SessionSpec& spec, const ListenerCallback& on_listener, const DnsCallback& on_dns,
    PreparedSandboxPtr prepared) {
  auto st = std::make_unique<State>();
  st->spec = spec;
  const RunSpec rs = runSpecOf(spec);
  using Launch = base::Result<std::unique_ptr<detail::Launched>>;
  std::promise<Launch> launched;
  auto future = launched.get_future();
  State* raw = st.get();
  st->keeper = std::thread([&launched, &rs, &on_listener, &on_dns, &prepared, raw] {
    std::vector<std::pair<std::string, std::int64_t>> phases;
    detail::PhaseClock clock(phases);
    RunHooks hooks;
    hooks.on_listener = on_listener;
    hooks.on_dns = on_dns;
    Launch l = detail::launchSandbox(rs, hooks, std::move(prepared), clock, /*session=*/true);
    const bool ok = l.has_value();
    launched.set_value(std::move(l));  // nothing of the caller's is touched after this
    if (!ok) return;
    std::unique_lock lock(raw->keeper_mu);
    raw->keeper_cv.wait(lock, [raw] { return raw->release_keeper; });
  });
  Launch l = future.get();
  std::unique_ptr<SandboxSession> session(new SandboxSession(std::move(st)));
  if (!l) return std::unexpected(l.error());  // ~SandboxSession joins the keeper
  State& s = *session->s_;
  s.sandbox = std::move(*l);
  if (auto r = waitUntilServing(*s.sandbox); !r) return std::unexpected(r.error());
  const std::string root = "/proc/" + std::to_string(s.sandbox->init) + "/root";
  s.root.reset(::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!s.root) return std::unexpected(setupError("session root", std::strerror(errno)));
  auto dev = detail::scratchDevice(s.root.get());
  if (!dev) return std::unexpected(setupError("session root", dev.error()));
  s.scratch_dev = *dev;
  s.work.reset(::openat(s.root.get(), "work", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!s.work) return std::unexpected(setupError("session /work", std::strerror(errno)));
  s.counters = s.sandbox->cgroup ? s.sandbox->cgroup->stats() : CgroupStats{};
  return session;
}

base::Result<RunResult> SandboxSession::exec(const ExecSpec& spec, const ExecHooks& hooks) {
  std::lock_guard serial(s_->exec_mu);
  if (auto r = s_->usable(); !r) return std::unexpected(r.error());
  if (auto r = checkExecSpec(spec); !r) return std::unexpected(r.error());
  auto env = execEnvironment(s_->spec, spec);
  if (!env) return std::unexpected(env.error());
  auto pipes =
      makeExecPipes(detail::encodeExecBlob(spec.argv, *env, spec.cwd), !spec.stdin_data.empty());
  if (!pipes) return std::unexpected(pipes.error());
  RunResult result;
  result.started_at = std::chrono::system_clock::now();
  const auto sent = detail::Clock::now();
  const int seq = ++s_->exec_seq;
  wakeInitHere(s_->sandbox->init);
  if (auto r = sendExec(s_->sandbox->pipes.chan_parent.get(), *pipes, seq); !r) {
    s_->breakWith(r.error().message);
    return std::unexpected(r.error());
  }
  const CgroupStats before = s_->counters;  // exec_mu held: only execs change it
  detail::Supervised sup = s_->supervise(spec, hooks, *pipes, sent, seq);
  const CgroupStats counters = detail::countersSince(s_->counters, before);
  detail::acceptReportLostToOom(sup, counters);
  const pid_t init = s_->sandbox->init;
  const bool init_gone = initGone(init);
  if (init_gone) s_->breakWith("the session's sandbox ended (its init died)");
  if (sup.child_error || !sup.have_report) return std::unexpected(detail::failureOf(sup));
  const bool disk_full = !init_gone && detail::scratchFullAt(s_->work.get());
  result.ended_at = std::chrono::system_clock::now();
  detail::fillOutcome(sup, counters, s_->spec.limits, disk_full, result);
  result.isolation = detail::isolationOf(*s_->sandbox, s_->spec.uid, s_->spec.gid);
  s_->account(result.usage);
  return result;
}

std::expected<FileInfo, std::string> SandboxSession::writeFile(const std::string& path,
                                                               std::string_view data) {
  auto root = s_->rootFor(path);
  if (!root) return std::unexpected(root.error());
  return detail::writeSandboxFile(root->root, path, data);
}

std::expected<FileInfo, std::string> SandboxSession::writeFileFrom(const std::string& path,
                                                                   int from) {
  auto root = s_->rootFor(path);
  if (!root) return std::unexpected(root.error());
  return detail::writeSandboxFileFrom(root->root, path, from);
}

std::expected<std::string, std::string> SandboxSession::readFile(const std::string& path,
                                                                 std::uint64_t max_bytes) {
  auto root = s_->rootFor(path);
  if (!root) return std::unexpected(root.error());
  return detail::readSandboxFile(root->root, path, max_bytes);
}

std::expected<std::vector<FileInfo>, std::string> SandboxSession::listDir(const std::string& path) {
  auto root = s_->rootFor(path);
  if (!root) return std::unexpected(root.error());
  return detail::listSandboxDir(root->root, path);
}

std::vector<Artifact> SandboxSession::artifacts() {
  auto root = s_->rootFor("/output");
  if (!root) return {};
  // Through our own fd of the sandbox's root (not /proc/<init>/root: end() may reap init
  // meanwhile, and its pid could then name another process).
  const std::string output = "/proc/self/fd/" + std::to_string(root->fd.get()) + "/output";
  auto arts = detail::collectArtifacts(output, "", s_->spec.limits.disk);
  return arts ? std::move(arts->files) : std::vector<Artifact>{};
}

Usage SandboxSession::usage() const {
  std::lock_guard lock(s_->mu);
  return s_->totals;
}

const std::string& SandboxSession::id() const { return s_->spec.session_id; }

void SandboxSession::end() {
  if (!s_) return;
  {
    std::lock_guard lock(s_->mu);
    if (s_->ended) return;
    s_->ended = true;
    // A running exec sees its pipes close at once; the pid namespace goes with init.
    if (s_->sandbox && s_->sandbox->init > 0) ::kill(s_->sandbox->init, SIGKILL);
  }
  {
    std::lock_guard serial(s_->exec_mu);  // a running exec has returned
    std::lock_guard lock(s_->mu);
    s_->root.reset();
    s_->work.reset();  // an open fd would keep the scratch tmpfs (and its contents) alive
    if (s_->sandbox) s_->sandbox->teardown();  // reaps init, removes the cgroup
    s_->sandbox.reset();
  }
  {
    std::lock_guard lock(s_->keeper_mu);
    s_->release_keeper = true;
  }
  s_->keeper_cv.notify_all();
  if (s_->keeper.joinable()) s_->keeper.join();
}

}  // namespace sluice::runner
