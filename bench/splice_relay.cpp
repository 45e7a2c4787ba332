// splice_relay: the least a CONNECT proxy can do, as a floor for bench/proxy_vs_squid.sh's
// bulk-download row. It answers every CONNECT with 200 (no policy, no audit, no limits, no
// event loop), dials the one upstream given on its command line, and relays each direction in
// its own thread with blocking splice(2) through a 1 MiB pipe: no copy to user space, no
// readiness wait, one thread per direction. What a download through it loses against curl
// straight to the upstream is the cost of the extra loopback TCP hop itself on this machine,
// which no relaying proxy can avoid. Not a proxy to use: it trusts its client completely.
//
// Usage: splice_relay LISTEN_PORT UPSTREAM_PORT    (both on 127.0.0.1; prints "ready")
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <thread>

#include "bare_relay.hpp"

namespace {

constexpr int kPipeBytes = 1024 * 1024;

// Moves bytes from -> to until EOF or an error, then half-closes `to`.
void pump(int from, int to) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return;
  ::fcntl(p[1], F_SETPIPE_SZ, kPipeBytes);
  for (;;) {
    ssize_t in = ::splice(from, nullptr, p[1], nullptr, kPipeBytes, SPLICE_F_MOVE);
    if (in <= 0) break;
    while (in > 0) {
      ssize_t out =
          ::splice(p[0], nullptr, to, nullptr, static_cast<std::size_t>(in), SPLICE_F_MOVE);
      if (out <= 0) {
        in = -1;
        break;
      }
      in -= out;
    }
    if (in < 0) break;
  }
  ::shutdown(to, SHUT_WR);
  ::close(p[0]);
  ::close(p[1]);
}

void serve(int client, int upstream_port) {
  int up = -1;
  if (!bare_relay::answerConnect(client) || (up = bare_relay::dialLoopback(upstream_port)) < 0) {
    ::close(client);
    return;
  }
  bare_relay::noDelay(client);
  std::thread upward(pump, client, up);
  pump(up, client);
  upward.join();
  ::close(up);
  ::close(client);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: splice_relay LISTEN_PORT UPSTREAM_PORT\n");
    return 2;
  }
  const int listen_port = std::atoi(argv[1]);
  const int upstream_port = std::atoi(argv[2]);
  const int l = bare_relay::listenLoopback(listen_port, 64);
  if (l < 0) {
    std::perror("splice_relay: listen");
    return 1;
  }
  std::printf("ready\n");
  std::fflush(stdout);
  for (;;) {
    int c = ::accept4(l, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;
    std::thread(serve, c, upstream_port).detach();
  }
}
