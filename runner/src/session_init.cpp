// The init of a session sandbox (child side): after the same set-up as a run's init it stays,
// idle, as pid 1 of the session's pid namespace, and serves one exec at a time received over
// its control socket: it starts the program exactly as a run's init does (spawnProgram, the
// same privilege drop, Landlock and seccomp), reaps everything, SIGKILLs what the program left
// when it exits, and reports. EOF on the control socket ends the session (init exits and the
// kernel kills whatever is left in its pid namespace). Like every init it may be a copy of a
// multi-threaded process: system calls only, no allocation.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "child.hpp"
#include "exec_request.hpp"
#include "namespaces.hpp"
#include "seccomp.hpp"

namespace sluice::runner::detail {
namespace {

struct ReceivedExec {
  int fds[kExecFdCount] = {-1, -1, -1, -1, -1, -1};
  int count = 0;
  int seq = 0;

  void closeAll() {
    for (int& fd : fds)
      if (fd >= 0) ::close(std::exchange(fd, -1));
  }
};

// One request from the control socket: 1 with its fds, 0 on EOF (the session ends), -1 for
// anything else (its fds closed; an interrupted call is retried).
int receiveExec(int control, ReceivedExec& out) {
  ExecRequest req;
  const Received r = receiveWithFds(control, &req, sizeof req, out.fds, kExecFdCount);
  out.count = r.fd_count;
  if (r.bytes <= 0) {  // EOF, or the socket is unusable: the session is over either way
    out.closeAll();
    return 0;
  }
  const bool ok = r.bytes == static_cast<ssize_t>(sizeof req) && !r.truncated &&
                  req.magic == kExecRequestMagic && out.count == static_cast<int>(req.fd_count) &&
                  out.count >= kExecStdin && req.seq > 0;
  if (!ok) out.closeAll();
  out.seq = req.seq;
  return ok ? 1 : -1;
}

[[noreturn]] void failSetUp(int error_fd, StepResult r) {
  reportStep(error_fd, ChildMessage::kSetupFailed, r.step, r.err);
  ::_exit(kInitSetupFailed);
}

// Built once by the session's init, in the sandbox's root, for every exec (buildLandlockRuleset).
int g_landlock_ruleset = -1;

// One exec: map its arguments, start the program, reap everything, report.
void serveExec(const ChildPlan& plan, ReceivedExec& req) {
  const int error_fd = req.fds[kExecError];
  struct stat st {};
  void* mem = MAP_FAILED;
  if (::fstat(req.fds[kExecBlob], &st) == 0 && st.st_size > 0)
    mem = ::mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ | PROT_WRITE, MAP_PRIVATE,
                 req.fds[kExecBlob], 0);
  ExecArgs args;
  if (mem == MAP_FAILED ||
      !decodeExecBlob(static_cast<char*>(mem), static_cast<std::size_t>(st.st_size), args)) {
    reportStep(error_fd, ChildMessage::kSetupFailed, "read exec request", EINVAL);
    if (mem != MAP_FAILED) ::munmap(mem, static_cast<std::size_t>(st.st_size));
    return;
  }
  ProgramLaunch launch;
  launch.argv = args.argv;
  launch.envp = args.envp;
  launch.cwd = args.cwd;
  launch.path_dirs = &plan.path_dirs;
  launch.privileges = &plan.privileges;
  launch.seccomp = nullptr;  // in force since sessionInitMain loaded it
  launch.landlock_ruleset = g_landlock_ruleset;
  launch.stdin_fd = req.count > kExecStdin ? req.fds[kExecStdin] : -1;
  launch.stdout_fd = req.fds[kExecStdout];
  launch.stderr_fd = req.fds[kExecStderr];
  launch.error_fd = error_fd;
  launch.session = true;
  launch.capability_bounds_dropped = true;  // sessionInitMain did it for itself
  const pid_t program = spawnProgram(launch);
  if (program < 0) reportStep(error_fd, ChildMessage::kSetupFailed, "start program", errno);
  killIfStopped();  // a stop that came before the program existed
  if (req.fds[kExecStdin] >= 0) ::close(std::exchange(req.fds[kExecStdin], -1));
  // Init keeps its copies of the output and error pipes until every process of the exec is
  // gone, and closes them just before it reports: sluice then sees their EOF and the report
  // together and wakes once, not once when the program execs (error pipe), once when it exits
  // (output) and once more for the report. (A run's init closes its copies at once: the time
  // of execve is one of the phases SLUICE_TIMING=1 shows.)
  InitReport rep{};
  if (program >= 0) rep = reapUntilEmpty(program);
  for (int i : {kExecStdout, kExecStderr, kExecError})
    if (req.fds[i] >= 0) ::close(std::exchange(req.fds[i], -1));
  if (program >= 0) writeFully(req.fds[kExecReport], &rep, sizeof rep);
  ::munmap(mem, static_cast<std::size_t>(st.st_size));
}

}  // namespace

void sessionInitMain(const ChildPlan& plan) {
  const ChildFds& f = plan.fds;
  initSetUp(plan);
  endExec();  // idle: no stop applies until the first exec
  installInitSignalHandlers();
  // What every exec's program would otherwise build for itself: the Landlock ruleset, and the
  // seccomp filter, loaded here into init (it needs none of what the filter refuses any more;
  // as root it needs no no_new_privs for it) and so inherited by every program.
  const LandlockRuleset ruleset = buildLandlockRuleset(plan.privileges);
  if (!ruleset.result) failSetUp(f.error_write, ruleset.result);
  g_landlock_ruleset = ruleset.fd;
  // The capability bounding and ambient sets, emptied once here rather than by every program
  // (forty-odd prctl calls each): init keeps its own capabilities, and no program it starts
  // can gain any through execve.
  if (auto r = dropCapabilityBounds(plan.privileges); !r) failSetUp(f.error_write, r);
  if (auto r = loadSeccompProgram(plan.seccomp); !r) failSetUp(f.error_write, r);
  // Ready: sluice reads 'R', then EOF on the error pipe. The run-only fds go.
  writeFully(f.report_write, "R", 1);
  for (int fd : {f.report_write, f.error_write, f.go_read, f.control_read, f.stdout_write,
                 f.stderr_write, f.stdin_read})
    ::close(fd);
  for (;;) {
    ReceivedExec req;
    const int got = receiveExec(f.listener_channel, req);
    if (got == 0) break;
    if (got < 0) continue;
    beginExec(req.seq);
    serveExec(plan, req);
    endExec();
    req.closeAll();
  }
  ::_exit(0);
}

}  // namespace sluice::runner::detail
