// HTTP/2 inside an inspected tunnel (h2_exchange.hpp): the session driver and the glue that
// turns each stream into one HTTP/1.1 exchange of the one pipeline.
#include "h2_exchange.hpp"

#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>

#include "h2_session.hpp"
#include "log.hpp"
#include "upstream_pool.hpp"

namespace sluice::proxy {

namespace {

constexpr std::size_t kReadBytes = 16 * 1024;
constexpr std::size_t kWriteBytes = 64 * 1024;
// Response body bytes held per stream before reading more from its exchange waits for the
// client to take them (flow control).
constexpr std::size_t kBodyHighWater = 64 * 1024;

// A wake-up for one waiting coroutine on the strand; a notify before the wait is not lost.
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

// A connected pair of stream sockets (the kernel's, so deadlines, hang-up detection and
// backpressure work on them as on a client's TCP socket). Asio only reads and writes them.
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

bool bodyMethod(std::string_view m) { return m == "POST" || m == "PUT" || m == "PATCH"; }

// The HTTP/1.1 request header a stream's header block means. Host is ":authority" (and a
// differing "host" field is kept too: two Host fields are refused by the pipeline). A body
// without content-length is sent chunked. Header values cannot hold CR, LF or NUL: nghttp2
// refuses such a stream before it gets here.
std::string requestHead(const H2Headers& h, bool end_stream, bool& chunked) {
  const auto authority = h2Value(h, ":authority");
  const auto host = h2Value(h, "host");
  std::string text =
      std::string(h2Value(h, ":method")) + " " + std::string(h2Value(h, ":path")) + " HTTP/1.1\r\n";
  if (!authority.empty()) text += "Host: " + std::string(authority) + "\r\n";
  if (!host.empty() && host != authority) text += "Host: " + std::string(host) + "\r\n";
  std::string cookies;  // RFC 9113 8.2.3: cookie crumbs are joined again for HTTP/1.1
  bool has_length = false;
  for (const auto& f : h) {
    if (f.name.empty() || f.name[0] == ':' || f.name == "host") continue;
    if (f.name == "cookie") {
      cookies += (cookies.empty() ? "" : "; ") + f.value;
      continue;
    }
    has_length = has_length || f.name == "content-length";
    text += f.name + ": " + f.value + "\r\n";
  }
  if (!cookies.empty()) text += "cookie: " + cookies + "\r\n";
  chunked = !end_stream && !has_length;
  if (chunked) text += "transfer-encoding: chunked\r\n";
  if (end_stream && !has_length && bodyMethod(h2Value(h, ":method")))
    text += "content-length: 0\r\n";
  return text + "\r\n";
}

// Connection-specific fields have no place in HTTP/2 (RFC 9113 8.2.2).
bool connectionSpecific(std::string_view name) {
  return name == "connection" || name == "keep-alive" || name == "proxy-connection" ||
         name == "transfer-encoding" || name == "upgrade" || name == "te";
}

H2Headers responseHeaders(const http::response_header<>& r) {
  H2Headers out{{":status", std::to_string(r.result_int())}};
  for (const auto& f : r) {
    std::string name(f.name_string());
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (connectionSpecific(name)) continue;
    out.push_back({std::move(name), std::string(f.value())});
  }
  return out;
}

std::string hexSize(std::size_t n) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%zx", n);
  return buf;
}

// One client stream and the exchange that handles it.
struct H2Stream {
  H2Stream(const net::any_io_executor& ex, const ConnState& base, std::int32_t stream_id)
      : id(stream_id),
        exchange_side(ex),
        glue_side(ex),
        watch(ex),
        conn(base),
        request_wake(ex),
        body_wake(ex) {}
  std::int32_t id;
  tcp::socket exchange_side;  // the Exchange's client stream
  tcp::socket glue_side;      // ours
  Watch watch;
  beast::flat_buffer buf;
  ConnState conn;  // the tunnel's, with this stream's own approval and injected names
  std::string method;
  // The request, on its way into the exchange.
  std::string to_exchange;
  std::size_t unconsumed = 0;  // DATA bytes in to_exchange not yet given back to the window
  bool chunked = false;
  bool request_ended = false;
  bool feed_failed = false;  // the exchange takes no more of the request
  Signal request_wake;
  // The response body, on its way to the client.
  std::string body;
  std::size_t body_off = 0;
  bool body_ended = false;
  Signal body_wake;
  bool closed = false;  // the HTTP/2 stream is closed

  std::size_t bodyPending() const { return body.size() - body_off; }
};

class H2Server final : public H2Front,
                       public H2Events,
                       public std::enable_shared_from_this<H2Server> {
 public:
  explicit H2Server(H2Tunnel t)
      : t_(std::move(t)), ex_(t_.client.get_executor()), read_watch_(ex_), out_(ex_) {}

  net::awaitable<void> run() override;
  void drain() override {
    draining_ = true;
    if (session_) session_->goaway();
    out_.notify();
  }

  void onHeaders(std::int32_t id, H2Headers headers, bool end_stream, bool too_large) override;
  void onData(std::int32_t id, std::string_view data) override;
  void onEndStream(std::int32_t id) override;
  void onClose(std::int32_t id, std::uint32_t error_code) override;
  H2Chunk readBody(std::int32_t id, std::uint8_t* out, std::size_t max) override;

 private:
  static net::awaitable<void> readLoop(std::shared_ptr<H2Server> self);
  static net::awaitable<void> exchange(std::shared_ptr<H2Server> self, std::shared_ptr<H2Stream> s);
  static net::awaitable<void> feed(std::shared_ptr<H2Server> self, std::shared_ptr<H2Stream> s);
  static net::awaitable<void> answer(std::shared_ptr<H2Server> self, std::shared_ptr<H2Stream> s);
  net::awaitable<void> readFrames();
  net::awaitable<void> writeFrames();
  net::awaitable<bool> relayBody(H2Stream& s, http::response_parser<http::buffer_body>& p,
                                 beast::flat_buffer& buf);
  void startStream(std::int32_t id, const H2Headers& headers, bool end_stream, bool too_large);
  std::shared_ptr<H2Stream> find(std::int32_t id) const {
    auto it = streams_.find(id);
    return it == streams_.end() ? nullptr : it->second;
  }
  void fail(H2Stream& s) {
    if (!s.closed) session_->reset(s.id, NGHTTP2_INTERNAL_ERROR);
    out_.notify();
  }
  static void closeStream(H2Stream& s);
  H2Limits limits() const;

  H2Tunnel t_;
  net::any_io_executor ex_;
  Watch read_watch_;  // the writer uses the tunnel's client watch
  Signal out_;        // frames may be waiting to be sent
  std::unique_ptr<H2Session> session_;
  std::map<std::int32_t, std::shared_ptr<H2Stream>> streams_;
  bool client_gone_ = false;
  bool reader_done_ = false;
  bool draining_ = false;
};

H2Limits H2Server::limits() const {
  H2Limits l;
  l.max_header_list_bytes = static_cast<std::uint32_t>(t_.conn.ctx->options.max_header_bytes);
  return l;
}

net::awaitable<void> H2Server::run() {
  session_ = H2Session::server(*this, limits());
  if (!session_) {
    log().error("cannot start an HTTP/2 session for {}", t_.target.authority());
    co_return;
  }
  net::co_spawn(ex_, readLoop(shared_from_this()), LogEscapedException{"h2 reader"});
  co_await writeFrames();
  // The session is over: the reader stops, every stream's exchange is told its client left.
  client_gone_ = true;
  ErrorCode ignored;
  t_.client.next_layer().cancel(ignored);
  for (auto& [id, s] : streams_) closeStream(*s);
  while (!reader_done_) co_await out_.wait();
  streams_.clear();
  t_.upstream->closeAll();
  read_watch_.timer.cancel();
}

net::awaitable<void> H2Server::readLoop(std::shared_ptr<H2Server> self) {
  co_await self->readFrames();
  self->client_gone_ = true;
  self->reader_done_ = true;
  self->out_.notify();
}

net::awaitable<void> H2Server::readFrames() {
  const auto& opt = t_.conn.ctx->options;
  std::vector<char> buf(kReadBytes);
  while (!client_gone_) {
    ErrorCode ec;
    std::size_t n = 0;
    t_.conn.idle = streams_.empty();
    if (streams_.empty()) {
      // No stream open: the connection may idle this long (streams have their exchange's).
      Deadline d(read_watch_, t_.client.next_layer(), Clock::now() + opt.idle_timeout,
                 [this] { return t_.conn.keep_alive(); });
      n = co_await t_.client.async_read_some(net::buffer(buf),
                                             net::redirect_error(net::use_awaitable, ec));
    } else {
      n = co_await t_.client.async_read_some(net::buffer(buf),
                                             net::redirect_error(net::use_awaitable, ec));
    }
    t_.conn.idle = false;
    if (ec) break;
    const bool ok = session_->recv(std::string_view(buf.data(), n));
    out_.notify();
    if (!ok) break;  // a protocol error: nghttp2 queued the GOAWAY the writer sends
  }
}

net::awaitable<void> H2Server::writeFrames() {
  const auto& opt = t_.conn.ctx->options;
  std::string out;
  for (;;) {
    out.clear();
    if (!session_->send(out, kWriteBytes)) break;
    if (!out.empty()) {
      ErrorCode ec;
      Deadline d(t_.client_watch, t_.client.next_layer(), Clock::now() + opt.upstream_timeout,
                 [this] { return t_.conn.keep_alive(); });
      co_await net::async_write(t_.client, net::buffer(out),
                                net::redirect_error(net::use_awaitable, ec));
      if (ec) break;
      continue;
    }
    if (client_gone_ || (draining_ && streams_.empty())) break;
    if (!session_->wantRead() && !session_->wantWrite()) break;
    co_await out_.wait();
  }
}

void H2Server::onHeaders(std::int32_t id, H2Headers headers, bool end_stream, bool too_large) {
  auto s = find(id);
  if (!s) {
    startStream(id, headers, end_stream, too_large);
    return;
  }
  // Trailers of a request body: the chunked body's trailer section.
  if (s->chunked && !s->feed_failed) {
    s->to_exchange += "0\r\n";
    for (const auto& f : headers)
      if (!f.name.empty() && f.name[0] != ':') s->to_exchange += f.name + ": " + f.value + "\r\n";
    s->to_exchange += "\r\n";
  }
  s->request_ended = true;
  s->request_wake.notify();
}

void H2Server::startStream(std::int32_t id, const H2Headers& headers, bool end_stream,
                           bool too_large) {
  if (draining_) {
    session_->reset(id, NGHTTP2_REFUSED_STREAM);
    return;
  }
  auto s = std::make_shared<H2Stream>(ex_, t_.conn, id);
  if (!socketPair(s->exchange_side, s->glue_side)) {
    log().error("cannot make a socket pair for an HTTP/2 stream: {}", std::strerror(errno));
    session_->reset(id, NGHTTP2_INTERNAL_ERROR);
    return;
  }
  std::weak_ptr<H2Stream> weak = s;
  s->conn.keep_alive = [weak] { return std::shared_ptr<void>(weak.lock()); };
  s->conn.pending_approval.clear();
  s->method = std::string(h2Value(headers, ":method"));
  if (too_large) {
    // Over the header list limit: the pipeline refuses a header that never ends within
    // max_header_bytes (431 header_too_large, with its requests row).
    s->to_exchange.assign(t_.conn.ctx->options.max_header_bytes + 1, 'x');
  } else {
    s->to_exchange = requestHead(headers, end_stream, s->chunked);
  }
  s->request_ended = end_stream;
  streams_[id] = s;
  auto self = shared_from_this();
  net::co_spawn(ex_, exchange(self, s), LogEscapedException{"h2 stream exchange"});
  net::co_spawn(ex_, feed(self, s), LogEscapedException{"h2 stream request"});
  net::co_spawn(ex_, answer(self, s), LogEscapedException{"h2 stream response"});
}

void H2Server::onData(std::int32_t id, std::string_view data) {
  auto s = find(id);
  if (!s || s->feed_failed) {
    session_->consume(id, data.size());  // nobody takes it: keep the connection window open
    return;
  }
  if (s->chunked) s->to_exchange += hexSize(data.size()) + "\r\n";
  s->to_exchange.append(data);
  if (s->chunked) s->to_exchange += "\r\n";
  s->unconsumed += data.size();
  s->request_wake.notify();
}

void H2Server::onEndStream(std::int32_t id) {
  auto s = find(id);
  if (!s) return;
  if (s->chunked && !s->feed_failed) s->to_exchange += "0\r\n\r\n";
  s->request_ended = true;
  s->request_wake.notify();
}

void H2Server::onClose(std::int32_t id, std::uint32_t) {
  auto s = find(id);
  if (!s) return;
  s->closed = true;
  closeStream(*s);
  streams_.erase(id);
  out_.notify();
}

// The client's side is gone: its exchange sees the hang-up (an approval it waits for is
// withdrawn, a response it writes fails) and its coroutines stop waiting.
void H2Server::closeStream(H2Stream& s) {
  ErrorCode ignored;
  s.glue_side.close(ignored);
  s.request_wake.notify();
  s.body_wake.notify();
}

H2Chunk H2Server::readBody(std::int32_t id, std::uint8_t* out, std::size_t max) {
  auto s = find(id);
  if (!s) return H2Chunk{0, false, true, false};
  const std::size_t avail = s->bodyPending();
  if (avail == 0) return s->body_ended ? H2Chunk{0, false, true, false} : H2Chunk{0, true};
  const std::size_t n = std::min(avail, max);
  std::memcpy(out, s->body.data() + s->body_off, n);
  s->body_off += n;
  if (s->body_off == s->body.size()) {
    s->body.clear();
    s->body_off = 0;
  }
  if (s->bodyPending() < kBodyHighWater) s->body_wake.notify();
  return H2Chunk{n, false, s->body_ended && s->bodyPending() == 0, false};
}

// The stream's exchange: the one pipeline, with an upstream connection borrowed from the pool.
net::awaitable<void> H2Server::exchange(std::shared_ptr<H2Server> self,
                                        std::shared_ptr<H2Stream> s) {
  {
    PooledLink link(*self->t_.upstream);
    co_await self->t_.upstream->lease(link);
    Exchange<tcp::socket, SslStream> ex(s->conn, s->exchange_side, s->watch, s->buf);
    ex.carry(Carrier::kInspected, &link, &self->t_.target);
    co_await ex.next(true);
  }
  ErrorCode ignored;
  s->exchange_side.close(ignored);  // a close-delimited response ends here
  s->watch.timer.cancel();
}

// The request's bytes into the exchange, as they arrive; the window opens as they are taken.
net::awaitable<void> H2Server::feed(std::shared_ptr<H2Server> self, std::shared_ptr<H2Stream> s) {
  for (;;) {
    if (!s->to_exchange.empty() && !s->closed) {
      std::string chunk = std::exchange(s->to_exchange, std::string());
      const std::size_t data = std::exchange(s->unconsumed, 0);
      ErrorCode ec;
      co_await net::async_write(s->glue_side, net::buffer(chunk),
                                net::redirect_error(net::use_awaitable, ec));
      self->session_->consume(s->id, data);
      self->out_.notify();
      if (ec) break;
      continue;
    }
    if (s->request_ended || s->closed) co_return;
    co_await s->request_wake.wait();
  }
  // The exchange ended before the request did (a refusal, a failure): the rest is dropped.
  s->feed_failed = true;
  self->session_->consume(s->id, std::exchange(s->unconsumed, 0));
  s->to_exchange.clear();
}

// The exchange's answer to the client: interim responses, the final header, the body.
net::awaitable<void> H2Server::answer(std::shared_ptr<H2Server> self, std::shared_ptr<H2Stream> s) {
  beast::flat_buffer buf;
  for (;;) {
    http::response_parser<http::buffer_body> p;
    p.body_limit(std::numeric_limits<std::uint64_t>::max());
    if (s->method == "HEAD") p.skip(true);
    ErrorCode ec;
    co_await http::async_read_header(s->glue_side, buf, p,
                                     net::redirect_error(net::use_awaitable, ec));
    if (ec || s->closed) {
      log().debug("h2 stream {}: no response from its exchange: {}", s->id, ec.message());
      co_return self->fail(*s);
    }
    const int status = p.get().result_int();
    if (status >= 100 && status < 200) {
      self->session_->interim(s->id, responseHeaders(p.get()));
      self->out_.notify();
      continue;
    }
    const bool body = !p.is_done();
    if (!self->session_->respond(s->id, responseHeaders(p.get()), body)) {
      log().debug("h2 stream {}: response header not accepted", s->id);
      co_return self->fail(*s);
    }
    self->out_.notify();
    if (body && !co_await self->relayBody(*s, p, buf)) self->fail(*s);
    co_return;
  }
}

// Body bytes from the exchange, held until nghttp2 sends them (at most kBodyHighWater).
net::awaitable<bool> H2Server::relayBody(H2Stream& s, http::response_parser<http::buffer_body>& p,
                                         beast::flat_buffer& buf) {
  std::vector<char> tmp(kReadBytes);
  while (!s.body_ended) {
    if (s.closed) co_return true;
    if (s.bodyPending() >= kBodyHighWater) {
      co_await s.body_wake.wait();
      continue;
    }
    p.get().body().data = tmp.data();
    p.get().body().size = tmp.size();
    ErrorCode ec;
    co_await http::async_read_some(s.glue_side, buf, p,
                                   net::redirect_error(net::use_awaitable, ec));
    if (ec == http::error::need_buffer) ec = {};
    s.body.append(tmp.data(), tmp.size() - p.get().body().size);
    if (ec && !p.is_done()) co_return false;
    s.body_ended = p.is_done();
    session_->resume(s.id);
    out_.notify();
  }
  co_return true;
}

}  // namespace

std::shared_ptr<H2Front> makeH2Front(H2Tunnel tunnel) {
  return std::make_shared<H2Server>(std::move(tunnel));
}

}  // namespace sluice::proxy
