// The processes on the sandbox side: the sandbox's init (pid 1 of its pid namespace: sets up
// namespaces and mounts, starts the program, reaps everything, reports the result, kills
// stragglers), the program (drops privileges, loads seccomp, execs), and the helper of a
// prepared sandbox (prepareMain). Init and the program may run in a copy of a multi-threaded
// process: syscalls and pre-built data only, no allocation, no exceptions. Only the helper,
// forked from a single-threaded parent, may allocate. See sandbox.cpp for the parent side.
#pragma once

#include <linux/filter.h>
#include <sched.h>
#include <sys/resource.h>

#include <cstdint>
#include <string>
#include <vector>

#include "mounts.hpp"
#include "privileges.hpp"

namespace sluice::runner::detail {

/// A setup failure reported child -> parent. Fixed size: written with one write(2).
struct ChildMessage {
  enum Kind : std::int32_t { kSetupFailed = 1, kExecFailed = 2 };
  std::int32_t kind = 0;
  std::int32_t err = 0;
  char step[96] = {};
};

/// The final report init -> parent after the program and every other process ended.
struct InitReport {
  std::int32_t wait_status = 0;  // of the program (pid 2)
  std::int32_t program_started = 0;
  rusage children{};  // RUSAGE_CHILDREN of init: every reaped process
};

/// Pipe/socket ends the child side uses (all O_CLOEXEC).
struct ChildFds {
  int go_read = -1;  // parent -> init: 'G' (cgroups set) or 'C' (join them), 'A' (listener adopted)
  int error_write = -1;       // -> parent: ChildMessage on failure; EOF once the program execs
  int report_write = -1;      // init -> parent: InitReport
  int control_read = -1;      // parent -> init: EOF means "tear down and exit"
  int listener_channel = -1;  // unix socket: the proxy listener, the v1 cgroup files
  int stdout_write = -1;
  int stderr_write = -1;
  int stdin_read = -1;  // the program's stdin when ChildPlan::stdin_pipe (else /dev/null)
};

/// What the program's process needs, for `sluice run` and for a session's execs alike: all of
/// it built beforehand, so the process between clone and execve only makes system calls.
struct ProgramLaunch {
  char* const* argv = nullptr;  // NULL-terminated
  char* const* envp = nullptr;  // NULL-terminated
  const char* cwd = "/work";
  const std::vector<std::string>* path_dirs = nullptr;  // PATH search for argv[0] without '/'
  const PrivilegePlan* privileges = nullptr;
  /// Loaded just before execve; null: already in force (a session's init loaded it for itself
  /// and every exec, since loading costs ~0.1 ms: the kernel compiles the filter).
  const std::vector<sock_filter>* seccomp = nullptr;
  int landlock_ruleset = -1;  // >= 0: a ruleset built once (a session's); else built here
  int stdin_fd = -1;          // -1: /dev/null
  int stdout_fd = -1;
  int stderr_fd = -1;
  int error_fd = -1;  // ChildMessage on failure; O_CLOEXEC, so EOF once the program execs
  // A session's exec. Where init could not exempt itself from the OOM killer, the program
  // gets oom_score_adj 1000 (a run's gets 0): the OOM killer then takes it rather than init,
  // whose death would end the whole session.
  bool session = false;
  // The bounding and ambient capability sets are already empty (a session's init emptied its
  // own, which the program inherits).
  bool capability_bounds_dropped = false;
  // The CPUs the program may run on, set first thing (a session's init is pinned to the CPU
  // of whoever sent the exec; the program gets the CPUs init started with); null: inherited.
  const cpu_set_t* cpus = nullptr;
};

struct ChildPlan {
  MountPlan mounts;
  PrivilegePlan privileges;
  std::vector<sock_filter> seccomp;
  std::vector<std::string> argv_storage, env_storage;
  std::vector<char*> argv, envp;       // NULL-terminated, pointing into the storage above
  std::vector<std::string> path_dirs;  // PATH search order for argv[0] without '/'
  bool network_proxy = false;
  bool stdin_pipe = false;  // the program reads fds.stdin_read (RunSpec::stdin_data)
  // A session's init (session_init.cpp): after set-up it serves execs over listener_channel.
  bool session = false;
  // Prepared sandbox (prepareMain): the namespaces exist, the host is named and lo is up.
  bool namespaces_ready = false;
  // User-namespace mode: wait for the uid/gid maps (written by sluice) before any setup.
  bool user_namespace = false;
  // sluice's own argv in memory (from /proc/self/stat): init overwrites its copy so the
  // sandbox's /proc/1/cmdline does not show sluice's command line.
  char* arg_start = nullptr;
  std::size_t arg_len = 0;
  ChildFds fds;
};

/// Exit status of init when setup failed (the parent reads the reason from the error pipe).
inline constexpr int kInitSetupFailed = 125;

/// Runs as init in the new namespaces (a session's with plan.session); never returns.
[[noreturn]] void initMain(const ChildPlan& plan);

/// A session's init (session_init.cpp): initSetUp(), then serves execs; never returns.
[[noreturn]] void sessionInitMain(const ChildPlan& plan);

/// Init's set-up, shared by `sluice run` and sessions: closes every fd the plan does not name,
/// builds the network and file system, waits for 'G' (in its cgroup; 'C': joins it), unshares the
/// cgroup namespace and waits for 'A' (the caller is ready). A failure is reported on
/// plan.fds.error_write and init exits.
void initSetUp(const ChildPlan& plan);

/// Init's handlers while a program runs: SIGUSR1/SIGTERM kill every other process of the pid
/// namespace (the reaping loop then reports); SIGINT and SIGPIPE are ignored. A stop may carry
/// the sequence number of the exec it is meant for (sigqueue); one for an exec that is not
/// running yet is remembered, one for an earlier exec ignored.
void installInitSignalHandlers();

/// A session's init: exec `seq` (>= 1) starts / no exec runs. A run's program is number 0.
void beginExec(int seq);
void endExec();
/// After spawnProgram(): kills the program (and all) if a stop for it came meanwhile.
void killIfStopped();

/// Starts the program like posix_spawn (clone with CLONE_VM | CLONE_VFORK, on a stack mapped
/// once per process): returns once it has exec'd or failed; -1 with errno if clone failed.
pid_t spawnProgram(const ProgramLaunch& launch);
/// Maps spawnProgram()'s stack now and faults in the pages a program's start uses, so that a
/// session's first exec does not (false if it cannot be mapped).
bool prepareProgramStack();

/// Reaps every process of the pid namespace (init is its pid 1). When `program` exits, every
/// other process is SIGKILLed (daemons, setsid double-forks). Returns the program's wait
/// status and the summed usage of everything reaped (maximum for ru_maxrss).
InitReport reapUntilEmpty(pid_t program);

/// write(2) of all of `data`, retrying EINTR and short writes; gives up silently on an error
/// (the reader is gone). System calls only: init's and the helper's writes to sluice.
void writeFully(int fd, const void* data, size_t size);

/// The step reporting of the child side: a ChildMessage on `fd`.
void reportStep(int fd, ChildMessage::Kind kind, const char* step, int err);

/// Closes every fd except those in `keep` (sorted in place; -1 entries are ignored).
void closeAllExcept(int* keep, int count);

/// The helper of a prepared sandbox (prepareSandbox in sandbox.cpp): a fork of the parent
/// made while it was still single-threaded, so unlike init it may allocate. Unshares the
/// mount, network, IPC, UTS and (for its next child) PID namespaces, sends the new network
/// namespace to the parent ('N' on fds.listener_channel; as root only), names the host and
/// brings up lo while the parent does its own start-up; then reads the encoded plan from
/// `plan_read` (EOF: the parent gave up), forks init as the parent's own child (CLONE_PARENT) and
/// writes init's pid to `pid_write`. Failures go to fds.error_write as a ChildMessage. Never
/// returns. `user_namespace` (not root): the helper unshares a user namespace too, then writes pid
/// 0 to `pid_write` and the parent writes its uid/gid maps (which init shares) before the plan.
[[noreturn]] void prepareMain(int plan_read, int pid_write, const ChildFds& fds,
                              bool user_namespace);

}  // namespace sluice::runner::detail
