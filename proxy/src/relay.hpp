// Streaming one HTTP message (header already parsed) from one stream to another: a parser
// with buffer_body feeding a serializer, so bodies of any size pass through a 32 KiB buffer.
// One template for every stream pair (TCP, TLS), used by the one exchange pipeline.
#pragma once

#include <functional>
#include <iterator>
#include <memory>
#include <memory_resource>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "deadline.hpp"
#include "sluice/base/net.hpp"
#include "sluice/policy/reason.hpp"

namespace sluice::proxy {

/// Header fields whose elements come from a per-connection memory pool (Beast allocates one
/// block per field; a pool makes that cheap).
using PmrAllocator = std::pmr::polymorphic_allocator<char>;
using PmrFields = http::basic_fields<PmrAllocator>;
using ReqParser = http::parser<true, http::buffer_body, PmrAllocator>;
using RespParser = http::parser<false, http::buffer_body, PmrAllocator>;

inline constexpr std::size_t kRelayBufferBytes = 32 * 1024;

/// A body relay buffer, borrowed from a small per-thread pool for the duration of one
/// message, so an idle kept-alive client holds none and a busy one does not malloc 32 KiB per
/// request. (Returned to whichever thread's pool is current; pools are never shared.)
class RelayBuffer {
 public:
  RelayBuffer();
  ~RelayBuffer();
  RelayBuffer(const RelayBuffer&) = delete;
  RelayBuffer& operator=(const RelayBuffer&) = delete;
  char* data() { return buf_.get(); }

 private:
  std::unique_ptr<char[]> buf_;
};

enum class RelayFail { kNone, kInput, kOutput, kLimit, kTransform };

/// An optional rewrite of a message body as it streams (relayMessage's `transform`): it sees
/// every buffer of body bytes before it is written and says what to write instead, holding
/// bytes back if it must (it answers for its own memory bound). Used by SigV4 streaming uploads
/// to put the real key's chunk signatures in (aws_signing.hpp).
class BodyTransform {
 public:
  virtual ~BodyTransform() = default;
  /// The bytes to write for `in` (valid until the next call; empty: nothing yet). `last`: the
  /// body ends with `in`. nullopt: refused (reason, detail say why); the message must not be
  /// completed, so the caller closes the output connection (RelayFail::kTransform).
  virtual std::optional<std::string_view> apply(std::string_view in, bool last) = 0;
  policy::Reason reason = policy::Reason::kInvalidRequest;
  std::string detail;
};

/// Trailer fields of a chunked message, in order (name as sent, value).
using TrailerFields = std::vector<std::pair<std::string, std::string>>;

/// Hands a chunked message's trailer fields to `take` just before the message's end is
/// written. The relay writes no trailers itself (Beast's parser appends them to the message's
/// fields, after the header has gone); an HTTP/2 side sends them as its stream's trailers.
/// The body passes through `inner` (another transform, optional) or unchanged. `take` returns
/// false to refuse the message (having set the tap's reason and detail).
template <bool isRequest>
class TrailerTap final : public BodyTransform {
 public:
  using Take = std::function<bool(TrailerFields&&, BodyTransform& tap)>;
  TrailerTap(const http::parser<isRequest, http::buffer_body, PmrAllocator>& p, Take take,
             std::unique_ptr<BodyTransform> inner = nullptr)
      : p_(p),
        header_fields_(static_cast<std::size_t>(std::distance(p.get().begin(), p.get().end()))),
        take_(std::move(take)),
        inner_(std::move(inner)) {}
  std::optional<std::string_view> apply(std::string_view in, bool last) override {
    auto out = inner_ ? inner_->apply(in, last) : std::optional<std::string_view>(in);
    if (!out) {
      reason = inner_->reason;
      detail = inner_->detail;
      return std::nullopt;
    }
    if (!last || !p_.chunked()) return out;
    TrailerFields trailers;
    auto it = p_.get().begin();
    std::advance(it, static_cast<std::ptrdiff_t>(header_fields_));
    for (; it != p_.get().end(); ++it)
      trailers.emplace_back(std::string(it->name_string()), std::string(it->value()));
    if (!trailers.empty() && !take_(std::move(trailers), *this)) return std::nullopt;
    return out;
  }

 private:
  const http::parser<isRequest, http::buffer_body, PmrAllocator>& p_;
  std::size_t header_fields_;
  Take take_;
  std::unique_ptr<BodyTransform> inner_;
};

struct RelayResult {
  RelayFail fail = RelayFail::kNone;
  bool header_written = false;
  bool timed_out = false;
  ErrorCode ec;
};

/// One end of a relay: a stream, the watch of its lowest layer, and (for input) its buffer.
template <typename Stream>
struct Endpoint {
  Stream& stream;
  Watch& watch;
  beast::flat_buffer& buf;
};

/// After a read into the offered buffer: sets the body to the bytes read. Returns false when
/// the read parsed only framing (a chunk header) and the body is not done: writing an empty
/// buffer would make the serializer emit a zero-size chunk, which ends a chunked body early,
/// so the caller reads again instead.
template <bool isRequest>
bool takeBodyBytes(http::parser<isRequest, http::buffer_body, PmrAllocator>& p, char* buf,
                   std::size_t size) {
  auto& body = p.get().body();
  body.size = size - body.size;
  body.data = buf;
  body.more = !p.is_done();
  if (body.size == 0) {
    if (!p.is_done()) return false;
    body.data = nullptr;
  }
  return true;
}

/// Runs the body bytes just read (takeBodyBytes) through `t`. False: refused. Sets `skip` when
/// there is nothing to write yet (a write of no bytes would end a chunked body early).
template <bool isRequest>
bool transformBody(http::parser<isRequest, http::buffer_body, PmrAllocator>& p, BodyTransform& t,
                   bool& skip) {
  auto& body = p.get().body();
  auto out = t.apply({static_cast<const char*>(body.data), body.data ? body.size : 0}, p.is_done());
  if (!out) return false;
  body.data = out->empty() ? nullptr : const_cast<char*>(out->data());
  body.size = out->size();
  skip = out->empty() && !p.is_done();
  return true;
}

/// Writes `h` as Beast's serializer does (start line, fields in order, CRLF) into `out`; 0 when
/// it does not fit in `cap` bytes. (relay.cpp)
std::size_t formatHeader(const http::request_header<PmrFields>& h, char* out, std::size_t cap);
std::size_t formatHeader(const http::response_header<PmrFields>& h, char* out, std::size_t cap);

/// A message that is whole in `in` (no body, or a Content-Length body already read along with
/// its header) and fits in one relay buffer with its header: formats the header into `buf` and
/// parses the body right after it. The bytes to send (0: not this case, nothing consumed); a
/// body that does not parse sets `ec`.
template <bool isRequest>
std::size_t takeWholeMessage(http::parser<isRequest, http::buffer_body, PmrAllocator>& p,
                             beast::flat_buffer& in, char* buf, ErrorCode& ec) {
  if (p.chunked()) return 0;
  const auto declared = p.content_length();
  if (!p.is_done() && !declared) return 0;
  const std::size_t len = p.is_done() ? 0 : static_cast<std::size_t>(*declared);
  if (len > in.size() || len > kRelayBufferBytes) return 0;
  const std::size_t head = formatHeader(p.get(), buf, kRelayBufferBytes - len);
  if (head == 0 || p.is_done()) return head;
  auto& body = p.get().body();
  body.data = buf + head;
  body.size = len;
  in.consume(p.put(in.data(), ec));
  if (!ec && !p.is_done()) ec = http::error::partial_message;
  return head + len;
}

/// Gives `p` what `buf` holds of a message header: true when the header is complete or `ec`
/// says why it cannot be.
template <bool isRequest>
bool headerFrom(http::parser<isRequest, http::buffer_body, PmrAllocator>& p,
                beast::flat_buffer& buf, ErrorCode& ec) {
  if (buf.size() == 0) return false;
  buf.consume(p.put(buf.data(), ec));
  if (ec == http::error::need_more) ec = {};
  return ec || p.is_header_done();
}

/// A read that failed under a header being parsed, as Beast's reads report it: the end of the
/// stream before any byte is end_of_stream, after some the parser's own verdict.
template <bool isRequest>
void endOfStream(http::parser<isRequest, http::buffer_body, PmrAllocator>& p, ErrorCode& ec) {
  if (ec != net::error::eof) return;
  if (!p.got_some()) {
    ec = http::error::end_of_stream;
    return;
  }
  ec = {};
  p.put_eof(ec);
  if (!ec && !p.is_header_done()) ec = http::error::partial_message;
}

/// relayMessage for a message that is not whole in `in`: the serializer sends the header, then
/// body bytes as they are read into `buf` (kRelayBufferBytes). When body bytes are already
/// buffered, header and first body bytes leave in one write (unless the body is chunked); when
/// none are, the header goes at once so the peer is not kept waiting (streaming responses,
/// slow uploads).
template <bool isRequest, typename In, typename Out, typename Count, typename KeepAlive>
net::awaitable<RelayResult> streamMessage(
    Endpoint<In> in, http::parser<isRequest, http::buffer_body, PmrAllocator>& p, Endpoint<Out> out,
    std::chrono::milliseconds timeout, Count count, KeepAlive keep, BodyTransform* transform,
    char* buf) {
  RelayResult res;
  auto& out_sock = beast::get_lowest_layer(out.stream);
  auto& in_sock = beast::get_lowest_layer(in.stream);
  http::serializer<isRequest, http::buffer_body, PmrFields> sr{p.get()};
  // A chunked body's trailer fields are appended to the message's fields as they are parsed:
  // its header goes before any body byte is parsed, so none of them is sent as a header field.
  if (!p.is_done() && (in.buf.size() == 0 || p.chunked())) {
    Deadline d(out.watch, out_sock, Clock::now() + timeout, keep);
    auto n = co_await http::async_write_header(out.stream, sr,
                                               net::redirect_error(net::use_awaitable, res.ec));
    if (res.ec) {
      res.timed_out = d.fired();
      res.fail = RelayFail::kOutput;
      co_return res;
    }
    res.header_written = true;
    if (!count(n)) {
      res.fail = RelayFail::kLimit;
      co_return res;
    }
  }
  while (!sr.is_done()) {
    if (!p.is_done()) {
      p.get().body().data = buf;
      p.get().body().size = kRelayBufferBytes;
      ErrorCode ec;
      {
        Deadline d(in.watch, in_sock, Clock::now() + timeout, keep);
        co_await http::async_read_some(in.stream, in.buf, p,
                                       net::redirect_error(net::use_awaitable, ec));
        if (ec && d.fired()) res.timed_out = true;
      }
      if (ec == http::error::need_buffer) ec = {};
      if (ec) {
        res.ec = ec;
        res.fail = RelayFail::kInput;
        co_return res;
      }
      if (!takeBodyBytes(p, buf, kRelayBufferBytes)) continue;
      bool skip = false;
      if (transform && !transformBody(p, *transform, skip)) {
        res.fail = RelayFail::kTransform;
        co_return res;
      }
      if (skip) continue;
    } else {
      // The input is done: the last write only finishes the message.
      p.get().body().data = nullptr;
      p.get().body().size = 0;
      p.get().body().more = false;
    }
    ErrorCode ec;
    std::size_t n = 0;
    {
      Deadline d(out.watch, out_sock, Clock::now() + timeout, keep);
      n = co_await http::async_write(out.stream, sr, net::redirect_error(net::use_awaitable, ec));
      if (ec && d.fired()) res.timed_out = true;
    }
    if (ec == http::error::need_buffer) ec = {};
    if (ec) {
      res.ec = ec;
      res.fail = RelayFail::kOutput;
      co_return res;
    }
    if (n) res.header_written = true;
    if (n && !count(n)) {
      res.fail = RelayFail::kLimit;
      co_return res;
    }
  }
  co_return res;
}

/// Streams one message: header (already parsed into `p`) then body, from `in` to `out`.
/// `transform` (optional) rewrites the body on the way (BodyTransform).
/// `count` is told every byte written to `out` and returns false to stop (limit). A message
/// already whole in `in` (takeWholeMessage) leaves in one write of one buffer, without the
/// serializer; any other streams (streamMessage).
template <bool isRequest, typename In, typename Out, typename Count, typename KeepAlive>
net::awaitable<RelayResult> relayMessage(
    Endpoint<In> in, http::parser<isRequest, http::buffer_body, PmrAllocator>& p, Endpoint<Out> out,
    std::chrono::milliseconds timeout, Count count, KeepAlive keep,
    BodyTransform* transform = nullptr) {
  RelayResult res;
  RelayBuffer relay_buf;
  char* buf = relay_buf.data();
  const std::size_t whole = transform ? 0 : takeWholeMessage(p, in.buf, buf, res.ec);
  if (whole == 0)
    co_return co_await streamMessage(in, p, out, timeout, count, keep, transform, buf);
  if (res.ec) {
    res.fail = RelayFail::kInput;
    co_return res;
  }
  Deadline d(out.watch, beast::get_lowest_layer(out.stream), Clock::now() + timeout, keep);
  const std::size_t n = co_await net::async_write(out.stream, net::buffer(buf, whole),
                                                  net::redirect_error(net::use_awaitable, res.ec));
  res.header_written = n > 0;
  if (res.ec) {
    res.timed_out = d.fired();
    res.fail = RelayFail::kOutput;
  } else if (!count(n)) {
    res.fail = RelayFail::kLimit;
  }
  co_return res;
}

}  // namespace sluice::proxy
