// Network-namespace plumbing (see namespaces.hpp).
#include "namespaces.hpp"

#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace sluice::runner::detail {

StepResult bringUpLoopback() {
  // A fresh network namespace has `lo` down: even 127.0.0.1 would be unreachable.
  int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return stepFail("socket for lo");
  ifreq ifr{};
  std::memcpy(ifr.ifr_name, "lo", 3);
  if (::ioctl(s, SIOCGIFFLAGS, &ifr) != 0) {
    int e = errno;
    ::close(s);
    return stepFail("get lo flags", e);
  }
  ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
  if (::ioctl(s, SIOCSIFFLAGS, &ifr) != 0) {
    int e = errno;
    ::close(s);
    return stepFail("bring lo up", e);
  }
  ::close(s);
  return stepOk();
}

StepResult sendProxyListener(int channel) {
  int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return stepFail("proxy listener socket");
  int one = 1;
  ::setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(kProxyPort);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    int e = errno;
    ::close(s);
    return stepFail("bind proxy listener 127.0.0.1:3128", e);
  }
  if (::listen(s, 128) != 0) {
    int e = errno;
    ::close(s);
    return stepFail("listen on proxy listener", e);
  }
  const char byte = 'L';
  const ssize_t n = sendWithFds(channel, &byte, 1, &s, 1);
  int e = errno;
  // The sandbox keeps no copy: only the proxy, in the host namespace, can accept on it.
  ::close(s);
  if (n != 1) return stepFail("send proxy listener to sluice", e);
  return stepOk();
}

int receiveFd(int channel) {
  char byte = 0;
  int fd = -1;
  const Received r = receiveWithFds(channel, &byte, 1, &fd, 1);
  if (r.bytes != 1 || r.fd_count != 1) {
    if (r.fd_count == 1) ::close(fd);
    if (r.bytes == 0) errno = EPIPE;
    if (r.bytes == 1) errno = EPROTO;
    return -1;
  }
  return fd;
}

ssize_t sendWithFds(int socket, const void* data, std::size_t size, const int* fds, int count) {
  if (count < 0 || count > kMaxPassedFds) {
    errno = EINVAL;
    return -1;
  }
  iovec iov{const_cast<void*>(data), size};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxPassedFds)] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (count > 0) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * count);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * count);
    std::memcpy(CMSG_DATA(c), fds, sizeof(int) * count);
  }
  ssize_t n;
  do n = ::sendmsg(socket, &msg, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  return n;
}

Received receiveWithFds(int socket, void* data, std::size_t size, int* fds, int max_fds) {
  iovec iov{data, size};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxPassedFds)] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  Received r;
  do r.bytes = ::recvmsg(socket, &msg, MSG_CMSG_CLOEXEC);
  while (r.bytes < 0 && errno == EINTR);
  if (r.bytes < 0) return r;
  r.truncated = (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const int got = static_cast<int>((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    for (int k = 0; k < got; ++k) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + k * sizeof(int), sizeof fd);
      if (r.fd_count < max_fds)
        fds[r.fd_count++] = fd;
      else
        ::close(fd);
    }
  }
  return r;
}

}  // namespace sluice::runner::detail
