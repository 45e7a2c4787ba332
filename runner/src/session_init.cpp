// The init of a session sandbox (child side): after the same set-up as a run's init it stays,
// idle, as pid 1 of the session's pid namespace, and serves one exec at a time received over
// its control socket: it starts the program exactly as a run's init does (spawnProgram, the
// same privilege drop, Landlock and seccomp), reaps everything, SIGKILLs what the program left
// when it exits, and reports. EOF on the control socket ends the session (init exits and the
// kernel kills whatever is left in its pid namespace). Like every init it may be a copy of a
// multi-threaded process: system calls only, no allocation.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "child.hpp"
#include "exec_request.hpp"
#include "namespaces.hpp"
#include "seccomp.hpp"

namespace sluice::runner::detail {
namespace {

// The exec's fds by ExecFd (-1: not sent), and where its blob is: inline in the message buffer,
// or a memfd mapped here (unmapped by release()).
struct ReceivedExec {
  int fds[kExecFdCount] = {-1, -1, -1, -1, -1, -1};
  int seq = 0;
  char* blob = nullptr;
  std::size_t blob_size = 0;
  bool mapped = false;

  void closeAll() {
    for (int& fd : fds)
      if (fd >= 0) ::close(std::exchange(fd, -1));
  }
  void release() {
    if (mapped) ::munmap(blob, blob_size);
    mapped = false;
    blob = nullptr;
  }
};

// One message: the header and the inline blob. Static: init does not allocate, and serves one
// exec at a time.
alignas(alignof(char*)) char g_message[sizeof(ExecRequest) + kExecInlineMax];

// The memfd blob, mapped privately (decodeExecBlob writes its pointer table into it).
bool mapBlob(ReceivedExec& out) {
  struct stat st {};
  if (::fstat(out.fds[kExecBlob], &st) != 0 || st.st_size <= 0) return false;
  void* mem = ::mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE, out.fds[kExecBlob], 0);
  if (mem == MAP_FAILED) return false;
  out.blob = static_cast<char*>(mem);
  out.blob_size = static_cast<std::size_t>(st.st_size);
  out.mapped = true;
  return true;
}

// The received fds into their ExecFd slots: the four always sent, then the optional ones the
// flags announce, in order. False if the count does not match the flags.
bool placeFds(const ExecRequest& req, const int* got, int count, ReceivedExec& out) {
  const bool has_stdin = (req.flags & kExecHasStdin) != 0;
  const bool memfd = (req.flags & kExecBlobInMemfd) != 0;
  if (count != kExecStdin + (has_stdin ? 1 : 0) + (memfd ? 1 : 0)) return false;
  int at = 0;
  for (int i = kExecStdout; i < kExecStdin; ++i) out.fds[i] = got[at++];
  if (has_stdin) out.fds[kExecStdin] = got[at++];
  if (memfd) out.fds[kExecBlob] = got[at++];
  return true;
}

// One request from the control socket: 1 with its fds and blob, 0 on EOF (the session ends),
// -1 for anything else (its fds closed; an interrupted call is retried).
int receiveExec(int control, ReceivedExec& out) {
  int got[kExecFdCount];
  const Received r = receiveWithFds(control, g_message, sizeof g_message, got, kExecFdCount);
  if (r.bytes <= 0) {  // EOF, or the socket is unusable: the session is over either way
    for (int i = 0; i < r.fd_count; ++i) ::close(got[i]);
    return 0;
  }
  ExecRequest req;
  std::memcpy(&req, g_message, std::min(sizeof req, static_cast<std::size_t>(r.bytes)));
  const bool memfd = (req.flags & kExecBlobInMemfd) != 0;
  bool ok = r.bytes >= static_cast<ssize_t>(sizeof req) && !r.truncated &&
            req.magic == kExecRequestMagic && req.seq > 0 &&
            static_cast<std::size_t>(r.bytes) == sizeof req + req.blob_bytes &&
            memfd == (req.blob_bytes == 0) && placeFds(req, got, r.fd_count, out);
  if (!ok)
    for (int i = 0; i < r.fd_count; ++i) ::close(got[i]);
  if (ok && !memfd) {
    out.blob = g_message + sizeof req;
    out.blob_size = req.blob_bytes;
  }
  out.seq = req.seq;
  return ok ? 1 : -1;
}

[[noreturn]] void failSetUp(int error_fd, StepResult r) {
  reportStep(error_fd, ChildMessage::kSetupFailed, r.step, r.err);
  ::_exit(kInitSetupFailed);
}

// Built once by the session's init, in the sandbox's root, for every exec (buildLandlockRuleset).
int g_landlock_ruleset = -1;

// The CPUs init started with, every exec's program's (sluice pins init to one CPU per exec).
cpu_set_t g_program_cpus;
bool g_have_program_cpus = false;

// One exec: decode its arguments, start the program, reap everything, report.
void serveExec(const ChildPlan& plan, ReceivedExec& req) {
  const int error_fd = req.fds[kExecError];
  ExecArgs args;
  if ((req.fds[kExecBlob] >= 0 && !mapBlob(req)) ||
      !decodeExecBlob(req.blob, req.blob_size, args)) {
    reportStep(error_fd, ChildMessage::kSetupFailed, "read exec request", EINVAL);
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
  launch.stdin_fd = req.fds[kExecStdin];
  launch.stdout_fd = req.fds[kExecStdout];
  launch.stderr_fd = req.fds[kExecStderr];
  launch.error_fd = error_fd;
  launch.session = true;
  launch.capability_bounds_dropped = true;  // sessionInitMain did it for itself
  launch.cpus = g_have_program_cpus ? &g_program_cpus : nullptr;
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
}

}  // namespace

void sessionInitMain(const ChildPlan& plan) {
  const ChildFds& f = plan.fds;
  initSetUp(plan);
  endExec();  // idle: no stop applies until the first exec
  g_have_program_cpus = ::sched_getaffinity(0, sizeof g_program_cpus, &g_program_cpus) == 0;
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
  // What the first exec would otherwise fault in on its way (a pooled run is a first exec):
  // the program's stack, and the first page of the message buffer.
  if (!prepareProgramStack()) failSetUp(f.error_write, stepFail("map the program's stack"));
  std::memset(g_message, 0, 4096);
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
    req.release();
    req.closeAll();
  }
  ::_exit(0);
}

}  // namespace sluice::runner::detail
