// SandboxZygote (sandbox.hpp): a small process, forked while its caller is single-threaded,
// that forks the namespace helpers of prepared sandboxes on request.
//
// Protocol (SOCK_SEQPACKET, one request at a time under the caller's mutex): the caller sends
// one byte (1: the helper also unshares a user namespace) with SCM_RIGHTS carrying the plan
// pipe's read end, the pid pipe's write end and the eight ChildFds, in that order; the zygote
// clones the helper with CLONE_PARENT (so it is the caller's child, reaped and PDEATHSIG'd
// there, like prepareSandbox()'s), closes its copies of the descriptors and answers with the
// helper's pid, or minus an errno.
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>

#include "child.hpp"
#include "launch.hpp"
#include "namespaces.hpp"
#include "sluice/runner/sandbox.hpp"

namespace sluice::runner {
namespace {

constexpr int kZygoteFds = 10;  // plan_r, pid_w, then ChildFds in declaration order

[[noreturn]] void zygoteMain(int sock) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  int keep[] = {sock};
  detail::closeAllExcept(keep, 1);
  ::prctl(PR_SET_NAME, "sluice-zygote", 0, 0, 0);
  for (;;) {
    char flag = 0;
    int fds[kZygoteFds];
    const detail::Received r = detail::receiveWithFds(sock, &flag, 1, fds, kZygoteFds);
    const int got = r.fd_count;
    if (r.bytes <= 0) ::_exit(0);  // the caller closed its end (or is gone)
    pid_t answer = -EPROTO;
    if (got == kZygoteFds && !r.truncated) {
      const pid_t helper = static_cast<pid_t>(::syscall(SYS_clone, CLONE_PARENT, 0, 0, 0, 0));
      if (helper == 0) {
        const detail::ChildFds f{fds[2], fds[3], fds[4], fds[5], fds[6], fds[7], fds[8], fds[9]};
        detail::prepareMain(fds[0], fds[1], f, flag == 1);  // never returns
      }
      answer = helper < 0 ? -errno : helper;
    }
    for (int i = 0; i < got; ++i) ::close(fds[i]);
    while (::send(sock, &answer, sizeof answer, MSG_NOSIGNAL) < 0 && errno == EINTR) {
    }
  }
}

}  // namespace

struct SandboxZygote::Impl {
  detail::Fd sock;
  pid_t pid = -1;
  std::mutex mu;  // one request and its answer at a time
};

SandboxZygote::SandboxZygote(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

SandboxZygote::~SandboxZygote() {
  if (!impl_) return;
  impl_->sock.reset();  // EOF: the zygote exits
  int st;
  while (impl_->pid > 0 && ::waitpid(impl_->pid, &st, 0) < 0 && errno == EINTR) {
  }
}

base::Result<std::unique_ptr<SandboxZygote>> SandboxZygote::start() {
  if (detail::threadCount() != 1)
    return std::unexpected(detail::setupError(
        "sandbox zygote", "must be started while the process is single-threaded"));
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
    return std::unexpected(detail::setupError("sandbox zygote", std::strerror(errno)));
  detail::Fd ours(sv[0]), theirs(sv[1]);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0)
    return std::unexpected(detail::setupError("fork sandbox zygote", std::strerror(errno)));
  if (pid == 0) {
    if (::getppid() != parent) ::_exit(0);  // the caller died before PDEATHSIG was set
    zygoteMain(theirs.get());
  }
  auto impl = std::make_unique<Impl>();
  impl->sock = std::move(ours);
  impl->pid = pid;
  return std::unique_ptr<SandboxZygote>(new SandboxZygote(std::move(impl)));
}

base::Result<PreparedSandboxPtr> SandboxZygote::prepare() {
  detail::Fd plan_r, pid_w;
  auto made = detail::newPreparedSandbox(plan_r, pid_w);
  if (!made) return std::unexpected(made.error());
  PreparedSandboxPtr p = std::move(*made);
  const detail::ChildFds c = p->pipes.childFds();
  const int fds[kZygoteFds] = {plan_r.get(),   pid_w.get(),    c.go_read,          c.error_write,
                               c.report_write, c.control_read, c.listener_channel, c.stdout_write,
                               c.stderr_write, c.stdin_read};
  const char flag = p->user_namespace ? 1 : 0;
  pid_t helper = -EPIPE;
  {
    std::lock_guard lock(impl_->mu);
    const ssize_t sent = detail::sendWithFds(impl_->sock.get(), &flag, 1, fds, kZygoteFds);
    if (sent != 1)
      return std::unexpected(detail::setupError("sandbox zygote", std::strerror(errno)));
    ssize_t got;
    while ((got = ::recv(impl_->sock.get(), &helper, sizeof helper, 0)) < 0 && errno == EINTR) {
    }
    if (got != static_cast<ssize_t>(sizeof helper))
      return std::unexpected(detail::setupError("sandbox zygote", "the zygote is gone"));
  }
  if (helper <= 0)
    return std::unexpected(detail::setupError("fork namespace helper", std::strerror(-helper)));
  p->helper = helper;
  return p;
}

}  // namespace sluice::runner
