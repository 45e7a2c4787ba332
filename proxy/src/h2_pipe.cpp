// Stream-to-exchange glue of HTTP/2 (h2_pipe.hpp).
#include "h2_pipe.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace sluice::proxy::h2pipe {

bool socketPair(tcp::socket& a, tcp::socket& b) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, fds) != 0) return false;
  ErrorCode ec;
  a.assign(tcp::v4(), fds[0], ec);
  if (ec) {
    ::close(fds[0]);
    ::close(fds[1]);
    return false;
  }
  b.assign(tcp::v4(), fds[1], ec);
  if (ec) ::close(fds[1]);
  return !ec;
}

void Inbound::data(std::string_view d) {
  if (failed || ended) return;
  if (chunked) {
    char size[24];
    std::snprintf(size, sizeof size, "%zx\r\n", d.size());
    bytes += size;
  }
  bytes.append(d);
  if (chunked) bytes += "\r\n";
  unconsumed += d.size();
  wake.notify();
}

void Inbound::end(const H2Headers* trailers) {
  if (ended) return;
  ended = true;
  if (chunked && !failed) {
    bytes += "0\r\n";
    if (trailers)
      for (const auto& f : *trailers)
        if (!f.name.empty() && f.name[0] != ':') bytes += f.name + ": " + f.value + "\r\n";
    bytes += "\r\n";
  }
  wake.notify();
}

net::awaitable<void> feed(tcp::socket& sock, Inbound& in, H2Session& session, std::int32_t id,
                          Signal& out, const bool& closed) {
  for (;;) {
    if (!in.bytes.empty() && !closed) {
      std::string chunk = std::exchange(in.bytes, std::string());
      const std::size_t data = std::exchange(in.unconsumed, 0);
      ErrorCode ec;
      co_await net::async_write(sock, net::buffer(chunk),
                                net::redirect_error(net::use_awaitable, ec));
      session.consume(id, data);
      out.notify();
      if (ec) break;
      continue;
    }
    if (in.ended || closed) co_return;
    co_await in.wake.wait();
  }
  // The other side stopped reading (a refusal, a failure): the rest is dropped.
  in.failed = true;
  session.consume(id, std::exchange(in.unconsumed, 0));
  in.bytes.clear();
}

H2Chunk Outbound::read(H2Session& session, std::int32_t id, std::uint8_t* out, std::size_t max) {
  const std::size_t n = std::min(pending(), max);
  if (n == 0 && !ended) return H2Chunk{0, true};
  std::memcpy(out, body.data() + off, n);
  off += n;
  if (off == body.size()) {
    body.clear();
    off = 0;
  }
  if (pending() < kHighWater) wake.notify();
  H2Chunk c{n, false, ended && pending() == 0, false};
  if (c.eof && has_trailers) {
    c.trailers = true;
    session.trailers(id, trailers);
  }
  return c;
}

std::string lowerName(std::string_view name) {
  std::string s(name);
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

bool connectionSpecific(std::string_view name) {
  return name == "connection" || name == "keep-alive" || name == "proxy-connection" ||
         name == "transfer-encoding" || name == "upgrade" || name == "te" || name == "host";
}

}  // namespace sluice::proxy::h2pipe
