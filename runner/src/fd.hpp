// Owned file descriptors and the small pipe helpers of the parent side (runs and sessions).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <string_view>
#include <utility>

namespace sluice::runner::detail {

/// An owned file descriptor (closed on destruction).
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    reset(std::exchange(o.fd_, -1));
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

/// pipe2(O_CLOEXEC) into `r` and `w`; false with errno on failure.
inline bool makePipe(Fd& r, Fd& w) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return false;
  r.reset(p[0]);
  w.reset(p[1]);
  return true;
}

/// write(2) to a pipe whose reader may be gone, without SIGPIPE killing this process (a library
/// must not rely on its caller ignoring it): the signal is blocked on this thread for the call
/// and a SIGPIPE the write raised is consumed; the caller sees EPIPE.
inline ssize_t writeWithoutSigpipe(int fd, const char* data, std::size_t size) {
  sigset_t pipe_only, old, pending;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  ::pthread_sigmask(SIG_BLOCK, &pipe_only, &old);
  sigpending(&pending);
  const bool was_pending = sigismember(&pending, SIGPIPE) == 1;
  const ssize_t n = ::write(fd, data, size);
  const int err = errno;
  if (n < 0 && err == EPIPE && !was_pending) {
    timespec zero{};
    while (::sigtimedwait(&pipe_only, nullptr, &zero) < 0 && errno == EINTR) {
    }
  }
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  errno = err;
  return n;
}

/// Writes all of `data` (retrying EINTR and short writes); false on error (EPIPE included,
/// never a SIGPIPE).
inline bool writeAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = writeWithoutSigpipe(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

}  // namespace sluice::runner::detail
