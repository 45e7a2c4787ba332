// The "whole request body" stage: some steps must see a request's entire body before its
// header leaves (placeholders swapped in the body change its length; an HMAC signature over
// the body goes in a header). Such a body is read whole, bounded by kWholeBodyBytes, then
// written upstream as an ordinary Content-Length body. Every other body streams through
// relayMessage unchanged.
#pragma once

#include <string>
#include <string_view>

#include "relay.hpp"

namespace sluice::proxy {

/// The most body the proxy reads whole before forwarding it (1 MiB).
inline constexpr std::size_t kWholeBodyBytes = std::size_t{1} << 20;

/// What becomes of a request's body.
enum class WholeBody {
  kStream,    // no body, or no step needs it whole: it streams (relayMessage)
  kRead,      // read it whole (readWholeBody), then write it (writeWholeRequest)
  kTooLarge,  // the deciding rule needs it whole, but its Content-Length exceeds the bound
};

/// What the steps after the decision need of a request's body.
struct BodyNeeds {
  bool swaps = false;  ///< the deciding rule has a placeholder (swapped in bodies it can read)
  bool signs = false;  ///< the deciding rule signs the body (it must have every byte)
  bool scans = false;  ///< the listener has placeholders (bodies are searched for leaks)
};

/// A body of known length up to `bound` is read whole when any step wants it. A larger one
/// streams unchanged and unscanned (its tokens are neither swapped nor detected: worthless
/// off their rule, and never the secret), unless the rule signs it: then it is refused. A
/// chunked body (length unknown) is read whole only for a rule that swaps or signs, and
/// refused when it turns out larger than the bound; to other rules it streams unscanned.
WholeBody wholeBodyNeed(const ReqParser& p, BodyNeeds needs, std::size_t bound);

/// Drops the header fields after the first `count`: trailer fields of a chunked body (Beast's
/// parser adds them to the header), which a body forwarded with Content-Length cannot carry.
void dropTrailers(PmrFields& fields, std::size_t count);

/// Sets the framing of a body forwarded whole: Content-Length `size`, no Transfer-Encoding.
void setWholeBodyFraming(http::request_header<PmrFields>& req, std::size_t size);

struct WholeBodyRead {
  RelayResult result;      // kInput when the body broke off, was malformed or timed out
  bool too_large = false;  // more than the bound arrived (the rest is unread)
};

/// Reads the rest of `p`'s body from `in` into `out`, at most `bound` bytes.
template <typename In, typename KeepAlive>
net::awaitable<WholeBodyRead> readWholeBody(Endpoint<In> in, ReqParser& p, std::string& out,
                                            std::size_t bound, std::chrono::milliseconds timeout,
                                            KeepAlive keep) {
  WholeBodyRead res;
  const std::size_t header_fields =
      static_cast<std::size_t>(std::distance(p.get().begin(), p.get().end()));
  auto& in_sock = beast::get_lowest_layer(in.stream);
  while (!p.is_done()) {
    if (out.size() > bound) {
      res.too_large = true;
      co_return res;
    }
    // Read straight into `out`, one byte past the bound at most (to see it is exceeded).
    const std::size_t have = out.size();
    const std::size_t room = std::min(kRelayBufferBytes, bound + 1 - have);
    out.resize(have + room);
    p.get().body().data = out.data() + have;
    p.get().body().size = room;
    ErrorCode ec;
    {
      Deadline d(in.watch, in_sock, Clock::now() + timeout, keep);
      co_await http::async_read_some(in.stream, in.buf, p,
                                     net::redirect_error(net::use_awaitable, ec));
      if (ec && d.fired()) res.result.timed_out = true;
    }
    out.resize(have + room - p.get().body().size);
    if (ec == http::error::need_buffer) ec = {};
    if (ec) {
      res.result.ec = ec;
      res.result.fail = RelayFail::kInput;
      co_return res;
    }
  }
  res.too_large = out.size() > bound;
  dropTrailers(static_cast<PmrFields&>(p.get()), header_fields);
  co_return res;
}

/// Writes `p`'s header (framed by setWholeBodyFraming) and `body` to `out` in one go.
/// `count` is told the bytes written and returns false to stop (a limit).
template <typename Out, typename Count, typename KeepAlive>
net::awaitable<RelayResult> writeWholeRequest(Endpoint<Out> out, ReqParser& p,
                                              std::string_view body,
                                              std::chrono::milliseconds timeout, Count count,
                                              KeepAlive keep) {
  RelayResult res;
  auto& b = p.get().body();
  b.data = body.empty() ? nullptr : const_cast<char*>(body.data());
  b.size = body.size();
  b.more = false;
  http::serializer<true, http::buffer_body, PmrFields> sr{p.get()};
  std::size_t n = 0;
  {
    Deadline d(out.watch, beast::get_lowest_layer(out.stream), Clock::now() + timeout, keep);
    n = co_await http::async_write(out.stream, sr, net::redirect_error(net::use_awaitable, res.ec));
    if (res.ec && d.fired()) res.timed_out = true;
  }
  res.header_written = n > 0;
  if (res.ec) {
    res.fail = RelayFail::kOutput;
  } else if (!count(n)) {
    res.fail = RelayFail::kLimit;
  }
  co_return res;
}

}  // namespace sluice::proxy
