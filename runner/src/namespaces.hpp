// Network-namespace plumbing for the child: bring `lo` up, create the proxy listener inside the
// namespace and pass it to the parent over a unix socketpair (SCM_RIGHTS).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

#include "step.hpp"

namespace sluice::runner::detail {

/// The address the proxy listens on inside every sandbox (DESIGN.md).
inline constexpr std::uint16_t kProxyPort = 3128;

/// Sets IFF_UP on `lo` of the calling process's network namespace (child side).
StepResult bringUpLoopback();

/// Creates a TCP socket listening on 127.0.0.1:kProxyPort in the current namespace, sends it
/// over `channel` and closes the child's copy (child side).
StepResult sendProxyListener(int channel);

/// Receives one fd sent with SCM_RIGHTS; -1 with errno on failure (parent side).
int receiveFd(int channel);

/// The most fds sendWithFds() and receiveWithFds() pass in one message.
inline constexpr int kMaxPassedFds = 16;

/// One message on a unix socket: `size` bytes with `count` fds (SCM_RIGHTS, at most
/// kMaxPassedFds; the sender's copies stay open). Retried on EINTR, never raises SIGPIPE.
/// Returns sendmsg's result (errno set on -1). System calls only, no allocation: usable in a
/// child of a multi-threaded process.
ssize_t sendWithFds(int socket, const void* data, std::size_t size, const int* fds, int count);

/// What receiveWithFds() got.
struct Received {
  ssize_t bytes = -1;      // recvmsg's result: 0 on EOF, -1 with errno on failure
  int fd_count = 0;        // fds stored (O_CLOEXEC); any beyond `max_fds` were closed
  bool truncated = false;  // the message or its fds did not fit (MSG_TRUNC / MSG_CTRUNC)
};

/// One message from a unix socket: up to `size` bytes into `data` and up to `max_fds`
/// (<= kMaxPassedFds) fds into `fds`. Retried on EINTR. System calls only, as sendWithFds.
Received receiveWithFds(int socket, void* data, std::size_t size, int* fds, int max_fds);

}  // namespace sluice::runner::detail
