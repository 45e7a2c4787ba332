// What bench/splice_relay.cpp and bench/tls_relay.cpp, the two bare relays the benchmarks
// measure as floors, share: loopback addresses, the listener, the CONNECT exchange and the dial.
// Header-only (two small benchmark programs); not for the proxy, which trusts no client.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <string>

namespace bare_relay {

inline sockaddr_in loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

inline void noDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/// A listening socket on 127.0.0.1:port (`flags` added to its type, e.g. SOCK_NONBLOCK), or -1.
inline int listenLoopback(int port, int backlog, int flags = 0) {
  int l = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | flags, 0);
  int one = 1;
  ::setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a = loopback(port);
  if (l < 0 || ::bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::listen(l, backlog) != 0) {
    if (l >= 0) ::close(l);
    return -1;
  }
  return l;
}

/// Reads the CONNECT request head byte by byte (so no tunnel byte is taken) up to its blank
/// line, and answers 200; false when the head is longer than 8 KiB or the client went away.
inline bool answerConnect(int client) {
  std::string head;
  char c;
  while (head.find("\r\n\r\n") == std::string::npos) {
    if (head.size() >= 8192 || ::read(client, &c, 1) != 1) return false;
    head += c;
  }
  static const char kOk[] = "HTTP/1.1 200 Connection established\r\n\r\n";
  return ::write(client, kOk, sizeof kOk - 1) == static_cast<ssize_t>(sizeof kOk - 1);
}

/// A connected TCP socket to 127.0.0.1:port with Nagle off, or -1.
inline int dialLoopback(int port) {
  int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a = loopback(port);
  if (s < 0 || ::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    if (s >= 0) ::close(s);
    return -1;
  }
  noDelay(s);
  return s;
}

}  // namespace bare_relay
