// Launching a sandbox, the parent's side: the plan the child side needs (built here, so the
// child never allocates), the pipes between them, the cgroup, init itself (forked from a helper
// that prepareSandbox() started, or cloned here), and the hand-over that lets the program start
// (cgroup attach, proxy listener, start gate). runSandboxed() and sessions both use it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <expected>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "child.hpp"
#include "fd.hpp"
#include "sluice/base/log.hpp"
#include "sluice/runner/cgroup.hpp"
#include "sluice/runner/sandbox.hpp"

namespace sluice::runner::detail {

using Clock = std::chrono::steady_clock;

base::Error setupError(std::string step, std::string message);

/// The component's logger ("runner").
inline spdlog::logger& runnerLog() { return base::logger(base::LoggerId::kRunner); }

/// Records how long each phase took (RunResult::phases, SLUICE_TIMING=1).
class PhaseClock {
 public:
  explicit PhaseClock(std::vector<std::pair<std::string, std::int64_t>>& out)
      : out_(&out), last_(Clock::now()) {}
  void mark(const char* phase) { markAt(phase, Clock::now()); }
  void markAt(const char* phase, Clock::time_point t);
  /// A phase that overlapped others (its own duration; the sequence of marks is unchanged).
  void add(const char* phase, std::int64_t us) { out_->emplace_back(phase, us); }

 private:
  std::vector<std::pair<std::string, std::int64_t>>* out_;
  Clock::time_point last_;
};

/// Everything between sluice and the sandbox's init and program (see ChildFds).
struct Pipes {
  Fd go_r, go_w, err_r, err_w, rep_r, rep_w, ctl_r, ctl_w, out_r, out_w, errs_r, errs_w;
  Fd in_r, in_w;  // the program's stdin (RunSpec::stdin_data)
  Fd chan_parent, chan_child;

  base::Result<void> make();
  ChildFds childFds() const;
  void closeChildEnds();
};

/// A sandbox whose namespaces a helper builds ahead of time (prepareSandbox).
struct PreparedSandboxState {
  pid_t helper = -1;            // -1 once reaped
  bool user_namespace = false;  // not root: the helper also unshares a user namespace
  Fd plan_w;                    // -> helper: the encoded plan, then EOF
  Fd pid_r;                     // <- helper: init's pid
  Pipes pipes;
  bool netns_taken = false;  // its network namespace ('N') was read off pipes.chan_parent

  void reapHelper(bool kill);
};

}  // namespace sluice::runner::detail

namespace sluice::runner {
// The opaque type of the public header is the launch state of a prepared sandbox.
struct PreparedSandbox : detail::PreparedSandboxState {
  ~PreparedSandbox() { reapHelper(true); }
};
}  // namespace sluice::runner

namespace sluice::runner::detail {

/// Threads of this process (/proc/self/stat field 20), or 0 if unknown.
long threadCount();

/// A prepared sandbox's parent side before its helper exists: the pipes, the plan pipe (the
/// helper's end in `plan_r`) and the pid pipe (the helper's end in `pid_w`).
base::Result<PreparedSandboxPtr> newPreparedSandbox(Fd& plan_r, Fd& pid_w);

/// What the parent keeps of a sandbox whose init runs. Destroying it while init lives kills
/// init (and with it the namespaces) and removes the cgroup: every early return is safe.
struct Launched {
  bool user_namespace = false;
  std::optional<CgroupLayout> layout;
  std::optional<Cgroup> cgroup;
  Pipes pipes;      // the parent's ends
  pid_t init = -1;  // -1 once reaped
  int landlock_abi = 0;
  Clock::time_point cloned_at;  // timeouts count from here

  Launched() = default;
  Launched(const Launched&) = delete;
  Launched& operator=(const Launched&) = delete;
  ~Launched() { kill(); }

  /// SIGKILLs init, reaps it, kills what is left in the cgroup and removes it.
  void kill();
  /// Closes the control pipe: init exits, and the kernel tears down its namespaces and every
  /// mount while the caller goes on (teardown() reaps it). Idempotent.
  void releaseInit();
  /// The normal end: releaseInit() if not done yet, reaps init, removes the cgroup.
  void teardown();
  /// Reads init's (or the program's) ChildMessage after a failure; `fallback_step` if none.
  base::Error childFailure(const char* fallback_step) const;
};

/// The checks every execution's spec passes first: a command, a valid execution id.
base::Result<void> validateRunSpec(const RunSpec& spec);

/// Builds the child plan for `spec`: mounts (with RunSpec::files), seccomp, environment, argv,
/// rlimits and privileges. Pointers point into the plan's own storage: it must not move after.
base::Result<void> buildChildPlan(const RunSpec& spec, bool user_namespace, ChildPlan& plan);

/// Validates, plans, creates the cgroup and starts init, then hands over: init joins the
/// cgroup, the proxy listener goes to hooks.on_listener, hooks.before_start passes, and init
/// is told to go on ('A'): to start the program, or with `session` to serve a session's execs
/// (it then keeps the listener channel as its control socket; see session_init.cpp).
base::Result<std::unique_ptr<Launched>> launchSandbox(const RunSpec& spec, const RunHooks& hooks,
                                                      PreparedSandboxPtr prepared,
                                                      PhaseClock& clock, bool session = false);

}  // namespace sluice::runner::detail
