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
  char byte = 'L';
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &s, sizeof(int));
  ssize_t n;
  do n = ::sendmsg(channel, &msg, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  int e = errno;
  // The sandbox keeps no copy: only the proxy, in the host namespace, can accept on it.
  ::close(s);
  if (n != 1) return stepFail("send proxy listener to sluice", e);
  return stepOk();
}

int receiveFd(int channel) {
  char byte = 0;
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do n = ::recvmsg(channel, &msg, MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  if (n != 1) {
    if (n == 0) errno = EPIPE;
    return -1;
  }
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  if (c == nullptr || c->cmsg_type != SCM_RIGHTS) {
    errno = EPROTO;
    return -1;
  }
  int fd = -1;
  std::memcpy(&fd, CMSG_DATA(c), sizeof(int));
  return fd;
}

}  // namespace sluice::runner::detail
