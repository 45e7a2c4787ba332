// http_relay: the least a single-threaded plain-HTTP forward proxy can do, as the floor of
// bench/proxy_vs_squid.sh's keep-alive row (Squid runs one worker, `sluice proxy` one thread).
// One epoll loop, level-triggered. Each client connection gets its own upstream connection to
// the one port given on the command line, dialled when it is accepted, and every read on
// either side is written to the other as it is: no parsing (nginx takes the absolute-form
// request line as it is), no policy, no audit, no limits, no per-request state. Per request
// that leaves the kernel work every proxy pays: a read and a write on each side, and its share
// of an `epoll_wait`. What a request through it costs beyond one sent straight to nginx is the
// extra loopback hop and the event loop's system calls on this machine. Not a proxy to use:
// it trusts its client completely and a slow reader stalls the loop.
//
// Usage: http_relay LISTEN_PORT UPSTREAM_PORT    (both on 127.0.0.1; prints "ready")
#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bare_relay.hpp"

namespace {

// Writes all of buf to fd (non-blocking), waiting for room when the socket is full; false
// when the peer is gone.
bool writeAll(int fd, const char* buf, std::size_t n) {
  while (n > 0) {
    ssize_t w = ::send(fd, buf, n, MSG_NOSIGNAL);
    if (w > 0) {
      buf += w;
      n -= static_cast<std::size_t>(w);
    } else if (w < 0 && errno == EAGAIN) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, -1);
    } else if (w < 0 && errno == EINTR) {
      continue;
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: http_relay LISTEN_PORT UPSTREAM_PORT\n");
    return 2;
  }
  const int listen_port = std::atoi(argv[1]);
  const int upstream_port = std::atoi(argv[2]);
  const int l = bare_relay::listenLoopback(listen_port, 1024, SOCK_NONBLOCK);
  const int ep = ::epoll_create1(EPOLL_CLOEXEC);
  if (l < 0 || ep < 0) {
    std::perror("http_relay: listen");
    return 1;
  }
  auto watch = [ep](int fd) {
    epoll_event e{};
    e.events = EPOLLIN;
    e.data.fd = fd;
    return ::epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e) == 0;
  };
  watch(l);
  std::vector<int> peer;  // by descriptor: the other side, or -1
  auto pair = [&peer](int a, int b) {
    const auto need = static_cast<std::size_t>(a > b ? a : b) + 1;
    if (peer.size() < need) peer.resize(need, -1);
    peer[static_cast<std::size_t>(a)] = b;
    peer[static_cast<std::size_t>(b)] = a;
  };
  auto drop = [&peer](int a) {  // closing a descriptor also takes it out of the epoll set
    const int b = peer[static_cast<std::size_t>(a)];
    peer[static_cast<std::size_t>(a)] = peer[static_cast<std::size_t>(b)] = -1;
    ::close(a);
    ::close(b);
  };
  std::printf("ready\n");
  std::fflush(stdout);
  static char buf[64 * 1024];
  epoll_event events[256];
  for (;;) {
    const int n = ::epoll_wait(ep, events, 256, -1);
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == l) {
        for (int c; (c = ::accept4(l, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0;) {
          const int u = bare_relay::dialLoopback(upstream_port);
          if (u < 0) {
            ::close(c);
            continue;
          }
          ::fcntl(u, F_SETFL, O_NONBLOCK);
          bare_relay::noDelay(c);
          pair(c, u);
          watch(c);
          watch(u);
        }
        continue;
      }
      if (static_cast<std::size_t>(fd) >= peer.size() || peer[static_cast<std::size_t>(fd)] < 0)
        continue;  // closed earlier in this batch
      const ssize_t r = ::read(fd, buf, sizeof buf);
      if (r > 0) {
        if (!writeAll(peer[static_cast<std::size_t>(fd)], buf, static_cast<std::size_t>(r)))
          drop(fd);
      } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
        drop(fd);
      }
    }
  }
}
