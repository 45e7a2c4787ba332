// The glue between an HTTP/2 stream and the HTTP/1.1 exchange that handles it (h2_exchange.hpp,
// h2_upstream.hpp): a socket pair carries the HTTP/1.1 message; DATA frames go in as its body
// (Inbound, given back to the peer's flow-control window as the socket takes them), and a body
// read from the socket goes out through nghttp2's data provider (Outbound, holding at most
// kHighWater bytes, so neither side is buffered whole). All on one strand.
#pragma once

#include <limits>
#include <string>
#include <string_view>

#include "h2_session.hpp"
#include "sluice/base/net.hpp"

namespace sluice::proxy::h2pipe {

inline constexpr std::size_t kReadBytes = 16 * 1024;
inline constexpr std::size_t kHighWater = 64 * 1024;

/// A wake-up for one waiting coroutine on the strand; a notify before the wait is not lost.
struct Signal {
  explicit Signal(const net::any_io_executor& ex) : timer(ex) {}
  void notify() {
    pending = true;
    timer.cancel();
  }
  net::awaitable<void> wait() {
    if (!pending) {
      timer.expires_at(net::steady_timer::time_point::max());
      ErrorCode ec;
      co_await timer.async_wait(net::redirect_error(net::use_awaitable, ec));
    }
    pending = false;
  }
  net::steady_timer timer;
  bool pending = false;
};

/// A connected pair of stream sockets: the kernel's, so deadlines, hang-up detection and
/// backpressure work on them as on a client's TCP socket (Asio only reads and writes them).
bool socketPair(tcp::socket& a, tcp::socket& b);

/// DATA of one stream on its way into a socket as an HTTP/1.1 body.
struct Inbound {
  explicit Inbound(const net::any_io_executor& ex) : wake(ex) {}
  std::string bytes;           // not yet written (header, framing and body)
  std::size_t unconsumed = 0;  // DATA bytes in `bytes` not yet given back to the window
  bool chunked = false;
  bool ended = false;
  bool failed = false;  // the socket takes no more: later DATA is dropped (and given back)
  Signal wake;

  void data(std::string_view d);
  /// The message ends (a chunked body with `trailers` as its trailer section).
  void end(const H2Headers* trailers = nullptr);
};

/// Writes `in` into `sock` as it fills, until the message ended or the socket failed;
/// `closed` says the stream is gone.
net::awaitable<void> feed(tcp::socket& sock, Inbound& in, H2Session& session, std::int32_t id,
                          Signal& out, const bool& closed);

/// A body read from a socket, on its way out through the data provider.
struct Outbound {
  explicit Outbound(const net::any_io_executor& ex) : wake(ex) {}
  std::string body;
  std::size_t off = 0;
  bool ended = false;
  bool has_trailers = false;
  H2Headers trailers;  // sent after the body when has_trailers
  Signal wake;         // room again below kHighWater

  std::size_t pending() const { return body.size() - off; }
  /// The data provider's read: submits the trailers when the body ends with them.
  H2Chunk read(H2Session& session, std::int32_t id, std::uint8_t* out, std::size_t max);
};

/// Reads the body of the message `p` has the header of from `sock` into `ob`; false when it
/// broke off. `closed` says the stream is gone (then it stops, true).
template <bool isRequest>
net::awaitable<bool> pumpBody(tcp::socket& sock, beast::flat_buffer& buf,
                              http::parser<isRequest, http::buffer_body>& p, Outbound& ob,
                              H2Session& session, std::int32_t id, Signal& out,
                              const bool& closed) {
  std::string tmp(kReadBytes, '\0');
  while (!ob.ended) {
    if (closed) co_return true;
    if (ob.pending() >= kHighWater) {
      co_await ob.wake.wait();
      continue;
    }
    p.get().body().data = tmp.data();
    p.get().body().size = tmp.size();
    ErrorCode ec;
    co_await http::async_read_some(sock, buf, p, net::redirect_error(net::use_awaitable, ec));
    if (ec == http::error::need_buffer) ec = {};
    ob.body.append(tmp.data(), tmp.size() - p.get().body().size);
    if (ec && !p.is_done()) co_return false;
    ob.ended = p.is_done();
    if (!closed) session.resume(id);
    out.notify();
  }
  co_return true;
}

/// Lower case, as HTTP/2 field names must be.
std::string lowerName(std::string_view name);
inline std::string lowerName(beast::string_view name) {
  return lowerName(std::string_view(name.data(), name.size()));
}

/// Connection-specific fields have no place in HTTP/2 (RFC 9113 8.2.2).
bool connectionSpecific(std::string_view lower_name);

}  // namespace sluice::proxy::h2pipe
