// tls_relay: the least an inspecting proxy can do, as a floor for bench/tls_vs_passthrough.sh's
// kept-alive row, the way bench/splice_relay.cpp is one for the CONNECT download. It answers
// every CONNECT with 200 (no policy, no audit, no HTTP parsing, no header edits, no limits),
// ends the client's TLS with a fixed certificate, opens TLS to the one upstream given on its
// command line (verified against a CA file, SNI "localhost"), and then moves plaintext between
// the two: every record decrypted on one side is re-encrypted on the other. One thread, one
// epoll loop (as `sluice proxy --threads 1`), non-blocking sockets, OpenSSL's own socket BIOs
// with read-ahead (one read(2) for as many records as have arrived), the same TLS 1.3 suites
// in the same order as sluice. What it loses against the passthrough tunnel is what decrypting
// and re-encrypting every byte costs on this machine, which no inspecting proxy can avoid.
// Not a proxy to use: it trusts its client completely and serves one upstream.
//
// Usage: tls_relay LISTEN_PORT UPSTREAM_PORT CERT KEY UPSTREAM_CA    (127.0.0.1; prints "ready")
// The connection set-up (CONNECT, the dial, both handshakes) blocks the loop: kept-alive load
// sets up a few connections once, and that is what this relay is for.
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <unordered_map>

#include "bare_relay.hpp"

namespace {

constexpr char kSuites[] =
    "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256";

void setBlocking(int fd, bool on) {
  int one = on ? 0 : 1;
  ::ioctl(fd, FIONBIO, &one);
}

// One relayed connection: the client's TLS (we are the server) and the upstream's.
struct Pair {
  int client_fd = -1;
  int upstream_fd = -1;
  SSL* client = nullptr;
  SSL* upstream = nullptr;
  ~Pair() {
    SSL_free(client);
    SSL_free(upstream);
    if (client_fd >= 0) ::close(client_fd);
    if (upstream_fd >= 0) ::close(upstream_fd);
  }
};

// Writes all of `n` bytes to `to`, waiting for writability when the socket is full (a kept-alive
// request or response is far smaller than a socket buffer, so this almost never waits).
bool writeAll(SSL* to, int fd, const char* p, int n) {
  while (n > 0) {
    int w = SSL_write(to, p, n);
    if (w > 0) {
      p += w;
      n -= w;
      continue;
    }
    int e = SSL_get_error(to, w);
    if (e != SSL_ERROR_WANT_WRITE && e != SSL_ERROR_WANT_READ) return false;
    pollfd f{fd, static_cast<short>(e == SSL_ERROR_WANT_WRITE ? POLLOUT : POLLIN), 0};
    ::poll(&f, 1, 1000);
  }
  return true;
}

// Moves everything readable from one side to the other; false when the connection is done.
bool relay(SSL* from, SSL* to, int to_fd) {
  char buf[16384];
  for (;;) {
    int n = SSL_read(from, buf, sizeof buf);
    if (n > 0) {
      if (!writeAll(to, to_fd, buf, n)) return false;
      continue;
    }
    int e = SSL_get_error(from, n);
    ERR_clear_error();
    return e == SSL_ERROR_WANT_READ;
  }
}

// Reads the CONNECT head, answers 200, dials the upstream and makes both handshakes, blocking.
std::unique_ptr<Pair> setUp(int client_fd, int upstream_port, SSL_CTX* server, SSL_CTX* client) {
  auto p = std::make_unique<Pair>();
  p->client_fd = client_fd;
  if (!bare_relay::answerConnect(client_fd)) return nullptr;
  if ((p->upstream_fd = bare_relay::dialLoopback(upstream_port)) < 0) return nullptr;
  bare_relay::noDelay(client_fd);
  p->client = SSL_new(server);
  SSL_set_fd(p->client, client_fd);
  if (SSL_accept(p->client) != 1) return nullptr;
  p->upstream = SSL_new(client);
  SSL_set_fd(p->upstream, p->upstream_fd);
  SSL_set_tlsext_host_name(p->upstream, "localhost");
  SSL_set1_host(p->upstream, "localhost");
  if (SSL_connect(p->upstream) != 1) return nullptr;
  setBlocking(client_fd, false);
  setBlocking(p->upstream_fd, false);
  return p;
}

SSL_CTX* context(const SSL_METHOD* method) {
  SSL_CTX* ctx = SSL_CTX_new(method);
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_ciphersuites(ctx, kSuites);
  SSL_CTX_set_read_ahead(ctx, 1);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  return ctx;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: tls_relay LISTEN_PORT UPSTREAM_PORT CERT KEY UPSTREAM_CA\n");
    return 2;
  }
  const int listen_port = std::atoi(argv[1]);
  const int upstream_port = std::atoi(argv[2]);
  SSL_CTX* server = context(TLS_server_method());
  SSL_CTX_set_options(server, SSL_OP_CIPHER_SERVER_PREFERENCE);
  SSL_CTX_set_num_tickets(server, 0);
  SSL_CTX* client = context(TLS_client_method());
  SSL_CTX_set_verify(client, SSL_VERIFY_PEER, nullptr);
  if (SSL_CTX_use_certificate_chain_file(server, argv[3]) != 1 ||
      SSL_CTX_use_PrivateKey_file(server, argv[4], SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_load_verify_locations(client, argv[5], nullptr) != 1) {
    std::fprintf(stderr, "tls_relay: cannot load the certificate, key or CA\n");
    return 1;
  }
  const int l = bare_relay::listenLoopback(listen_port, 1024, SOCK_NONBLOCK);
  if (l < 0) {
    std::perror("tls_relay: listen");
    return 1;
  }
  int ep = ::epoll_create1(EPOLL_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = l;
  ::epoll_ctl(ep, EPOLL_CTL_ADD, l, &ev);
  // Each socket's fd -> its pair (both sockets of a pair map to it).
  std::unordered_map<int, std::shared_ptr<Pair>> pairs;
  std::printf("ready\n");
  std::fflush(stdout);
  epoll_event events[64];
  for (;;) {
    int n = ::epoll_wait(ep, events, 64, -1);
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == l) {
        int c;
        while ((c = ::accept4(l, nullptr, nullptr, SOCK_CLOEXEC)) >= 0) {
          std::shared_ptr<Pair> p = setUp(c, upstream_port, server, client);
          if (!p) continue;  // its destructor closed what it opened
          // Read-ahead may have taken the client's first request into the TLS buffer during
          // the handshake, where no readiness event will ever announce it: relay it now.
          if (!relay(p->client, p->upstream, p->upstream_fd)) continue;
          for (int s : {p->client_fd, p->upstream_fd}) {
            epoll_event e{};
            e.events = EPOLLIN;
            e.data.fd = s;
            ::epoll_ctl(ep, EPOLL_CTL_ADD, s, &e);
            pairs[s] = p;
          }
        }
        continue;
      }
      auto it = pairs.find(fd);
      if (it == pairs.end()) continue;
      std::shared_ptr<Pair> p = it->second;
      const bool from_client = fd == p->client_fd;
      bool alive = from_client ? relay(p->client, p->upstream, p->upstream_fd)
                               : relay(p->upstream, p->client, p->client_fd);
      if (!alive) {
        pairs.erase(p->client_fd);
        pairs.erase(p->upstream_fd);
      }
    }
  }
}
