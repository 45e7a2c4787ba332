// The processes on the sandbox side: the sandbox's init (pid 1 of its pid namespace: sets up
// namespaces and mounts, starts the program, reaps everything, reports the result, kills
// stragglers), the program (drops privileges, loads seccomp, execs), and the helper of a
// prepared sandbox (prepareMain). Init and the program may run in a copy of a multi-threaded
// process: syscalls and pre-built data only, no allocation, no exceptions. Only the helper,
// forked from a single-threaded parent, may allocate. See sandbox.cpp for the parent side.
#pragma once

#include <linux/filter.h>
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
  int go_read = -1;           // parent -> init: byte 'G' (cgroups set), 'A' (listener adopted)
  int error_write = -1;       // -> parent: ChildMessage on failure; EOF once the program execs
  int report_write = -1;      // init -> parent: InitReport
  int control_read = -1;      // parent -> init: EOF means "tear down and exit"
  int listener_channel = -1;  // unix socket: the proxy listener travels over it
  int stdout_write = -1;
  int stderr_write = -1;
};

struct ChildPlan {
  MountPlan mounts;
  PrivilegePlan privileges;
  std::vector<sock_filter> seccomp;
  std::vector<std::string> argv_storage, env_storage;
  std::vector<char*> argv, envp;       // NULL-terminated, pointing into the storage above
  std::vector<std::string> path_dirs;  // PATH search order for argv[0] without '/'
  bool network_proxy = false;
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

/// Runs as init in the new namespaces; never returns.
[[noreturn]] void initMain(const ChildPlan& plan);

/// The helper of a prepared sandbox (prepareSandbox in sandbox.cpp): a fork of the parent
/// made while it was still single-threaded, so unlike init it may allocate. Unshares the
/// mount, network, IPC, UTS and (for its next child) PID namespaces, names the host and brings
/// up lo while the parent does its own start-up; then reads the encoded plan from `plan_read`
/// (EOF: the parent gave up), forks init as the parent's own child (CLONE_PARENT) and writes
/// init's pid to `pid_write`. Failures go to fds.error_write as a ChildMessage. Never returns.
/// `user_namespace` (not root): the helper unshares a user namespace too, then writes pid 0 to
/// `pid_write` and the parent writes its uid/gid maps (which init shares) before the plan.
[[noreturn]] void prepareMain(int plan_read, int pid_write, const ChildFds& fds,
                              bool user_namespace);

}  // namespace sluice::runner::detail
