// The inspected WebSocket relay: after a 101, each direction runs a ws::FrameRelay over its
// byte stream (websocket_frames.hpp). Client text messages get the upgrade rule's placeholders
// swapped, and one holding another rule's token ends the WebSocket (close 1008); server text
// messages get injected secrets redacted. Each direction writes only to its own destination
// (two writers on one TLS stream would interleave): on a close it sends the close frame
// onward and stops reading; the peer's answering close travels back through the other
// direction, which then ends the connection.
#pragma once

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include <memory>
#include <string>

#include "exchange.hpp"
#include "log.hpp"
#include "websocket_frames.hpp"

namespace sluice::proxy {

/// The relays of the two directions (client to upstream, upstream to client) of a WebSocket
/// upgraded under `rule_id`; nullopt when nothing needs its frames (the listener has no
/// placeholders and no secret was injected): then the bytes pass as a plain tunnel.
std::optional<std::pair<ws::FrameRelay, ws::FrameRelay>> webSocketRelays(
    const std::string& rule_id, std::shared_ptr<const policy::SecretStore> secrets,
    const std::vector<Placeholder>& placeholders, const std::vector<std::string>& injected);

/// Records on the connection's row (and in the log) why the proxy closed a WebSocket.
void noteClose(audit::ConnectionEvent& row, const ws::CloseWith& closing);

/// One direction. `up`: client to upstream (its close frames go masked, RFC 6455 5.1).
template <typename From, typename To>
net::awaitable<void> relayFrames(std::shared_ptr<void> keep, std::shared_ptr<Watch> watch,
                                 From& from, To& to, ConnState* conn, audit::ConnectionEvent* row,
                                 bool up, std::string pending, ws::FrameRelay relay) {
  const auto limits = conn->workflow().limits;
  auto buf = std::make_unique<char[]>(kRelayBufferBytes);
  auto& from_sock = beast::get_lowest_layer(from);
  std::string out;
  bool ended_by_close = false;
  for (;;) {
    auto closing = relay.feed(pending, out);
    if (!out.empty()) {
      ErrorCode ec;
      co_await net::async_write(to, net::buffer(out), net::redirect_error(net::use_awaitable, ec));
      const std::size_t n = out.size();
      OPENSSL_cleanse(out.data(), out.size());  // a swapped secret may be in it
      out.clear();
      if (ec) break;
      (up ? row->bytes_up : row->bytes_down) += n;
      if (!(up ? conn->account().addBytesOut(n, limits) : conn->account().addBytesIn(n, limits))) {
        row->reason = std::string(policy::reasonName(policy::Reason::kLimitExceeded));
        break;
      }
    }
    if (closing) {
      std::array<std::uint8_t, 4> mask{};
      if (up) RAND_bytes(mask.data(), mask.size());
      const std::string frame =
          ws::makeFrame(ws::kClose, ws::closePayload(closing->code, closing->reason), up, mask);
      ErrorCode ec;
      co_await net::async_write(to, net::buffer(frame),
                                net::redirect_error(net::use_awaitable, ec));
      noteClose(*row, *closing);
      ended_by_close = up;  // the upstream's answering close still has to reach the client
      break;
    }
    ErrorCode ec;
    std::size_t n = 0;
    {
      Deadline d(*watch, from_sock, Clock::now() + conn->ctx->options.idle_timeout,
                 [&] { return keep; });
      n = co_await from.async_read_some(net::buffer(buf.get(), kRelayBufferBytes),
                                        net::redirect_error(net::use_awaitable, ec));
    }
    if (ec) break;
    pending.append(buf.get(), n);
  }
  watch->timer.cancel();
  if (ended_by_close) co_return;
  ErrorCode ignored;
  beast::get_lowest_layer(from).close(ignored);
  beast::get_lowest_layer(to).close(ignored);
}

}  // namespace sluice::proxy
