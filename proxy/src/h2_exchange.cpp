// HTTP/2 inside an inspected tunnel (h2_exchange.hpp): the session driver and the glue that
// turns each stream into one HTTP/1.1 exchange of the one pipeline.
#include "h2_exchange.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>

#include "h2_pipe.hpp"
#include "h2_session.hpp"
#include "h2_upstream.hpp"
#include "injection.hpp"
#include "log.hpp"
#include "upstream_pool.hpp"

namespace sluice::proxy {

namespace {

using h2pipe::connectionSpecific;
using h2pipe::lowerName;

constexpr std::size_t kWriteBytes = 64 * 1024;

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

H2Headers responseHeaders(const http::response_header<>& r) {
  H2Headers out{{":status", std::to_string(r.result_int())}};
  for (const auto& f : r) {
    auto name = lowerName(f.name_string());
    if (connectionSpecific(name)) continue;
    out.push_back({std::move(name), std::string(f.value())});
  }
  return out;
}

// Trailer fields as HTTP/2 sends them: lower-case names, no connection-specific fields.
H2Headers h2Fields(TrailerFields fields) {
  H2Headers out;
  for (auto& [name, value] : fields) {
    std::string lower = lowerName(std::string_view(name));
    if (!connectionSpecific(lower)) out.push_back({std::move(lower), std::move(value)});
  }
  return out;
}

// One client stream and the exchange that handles it.
struct H2Stream {
  H2Stream(const net::any_io_executor& ex, const ConnState& base, std::int32_t stream_id)
      : id(stream_id),
        exchange_side(ex),
        glue_side(ex),
        watch(ex),
        conn(base),
        request(ex),
        response(ex) {}
  std::int32_t id;
  tcp::socket exchange_side;  // the Exchange's client stream
  tcp::socket glue_side;      // ours
  Watch watch;
  beast::flat_buffer buf;
  ConnState conn;  // the tunnel's, with this stream's own approval and injected names
  std::string method;
  bool te_trailers = false;
  h2pipe::Inbound request;    // into the exchange
  h2pipe::Outbound response;  // its body, to the client
  bool closed = false;        // the HTTP/2 stream is closed
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
  net::awaitable<void> viaPool(std::shared_ptr<H2Stream> s);
  net::awaitable<void> viaH2(std::shared_ptr<H2Stream> s);
  void takeTrailers(H2Stream& s, H2Headers trailers);
  net::awaitable<void> readFrames();
  net::awaitable<void> writeFrames();
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
  Watch read_watch_;    // the writer uses the tunnel's client watch
  h2pipe::Signal out_;  // frames may be waiting to be sent
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
  if (t_.upstream) t_.upstream->closeAll();
  if (t_.h2_upstream) t_.h2_upstream->close();
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
  std::vector<char> buf(h2pipe::kReadBytes);
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
    // Let the other streams' ready work queue its frames too: they leave in one write.
    co_await net::post(ex_, net::use_awaitable);
  }
}

void H2Server::onHeaders(std::int32_t id, H2Headers headers, bool end_stream, bool too_large) {
  auto s = find(id);
  if (!s) {
    startStream(id, headers, end_stream, too_large);
    return;
  }
  s->request.end(&headers);  // a request's trailers: the chunked body's trailer section
}

void H2Server::startStream(std::int32_t id, const H2Headers& headers, bool end_stream,
                           bool too_large) {
  if (draining_) {
    session_->reset(id, NGHTTP2_REFUSED_STREAM);
    return;
  }
  auto s = std::make_shared<H2Stream>(ex_, t_.conn, id);
  if (!h2pipe::socketPair(s->exchange_side, s->glue_side)) {
    log().error("cannot make a socket pair for an HTTP/2 stream: {}", std::strerror(errno));
    session_->reset(id, NGHTTP2_INTERNAL_ERROR);
    return;
  }
  std::weak_ptr<H2Stream> weak = s;
  s->conn.keep_alive = [weak] { return std::shared_ptr<void>(weak.lock()); };
  s->conn.pending_approval.clear();
  s->conn.adopt(t_.conn.listener->policy());  // each stream decided by the policy in force
  s->method = std::string(h2Value(headers, ":method"));
  s->te_trailers = h2Value(headers, "te") == "trailers";
  if (too_large) {
    // Over the header list limit: the pipeline refuses a header that never ends within
    // max_header_bytes (431 header_too_large, with its requests row).
    s->request.bytes.assign(t_.conn.ctx->options.max_header_bytes + 1, 'x');
  } else {
    s->request.bytes = requestHead(headers, end_stream, s->request.chunked);
  }
  s->request.ended = end_stream;
  streams_[id] = s;
  auto self = shared_from_this();
  net::co_spawn(ex_, exchange(self, s), LogEscapedException{"h2 stream exchange"});
  net::co_spawn(ex_, feed(self, s), LogEscapedException{"h2 stream request"});
  net::co_spawn(ex_, answer(self, s), LogEscapedException{"h2 stream response"});
}

void H2Server::onData(std::int32_t id, std::string_view data) {
  auto s = find(id);
  if (!s || s->request.failed) {
    session_->consume(id, data.size());  // nobody takes it: keep the connection window open
    return;
  }
  s->request.data(data);
}

void H2Server::onEndStream(std::int32_t id) {
  if (auto s = find(id)) s->request.end();
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
  s.request.wake.notify();
  s.response.wake.notify();
}

H2Chunk H2Server::readBody(std::int32_t id, std::uint8_t* out, std::size_t max) {
  auto s = find(id);
  if (!s) return H2Chunk{0, false, true, false};
  return s->response.read(*session_, id, out, max);
}

// The stream's exchange: the one pipeline, its upstream the HTTP/2 upstream session or a
// connection borrowed from the HTTP/1.1 pool.
net::awaitable<void> H2Server::exchange(std::shared_ptr<H2Server> self,
                                        std::shared_ptr<H2Stream> s) {
  if (self->t_.h2_upstream)
    co_await self->viaH2(s);
  else
    co_await self->viaPool(s);
  ErrorCode ignored;
  s->exchange_side.close(ignored);  // a close-delimited response ends here
  s->watch.timer.cancel();
}

net::awaitable<void> H2Server::viaPool(std::shared_ptr<H2Stream> s) {
  PooledLink link(*t_.upstream);  // lent a connection once the stream is admitted (take)
  Exchange<tcp::socket, SslStream> ex(s->conn, s->exchange_side, s->watch, s->buf);
  ex.carry(Carrier::kInspected, &link, &t_.target);
  // An HTTP/1.1 upstream's chunked trailers (gRPC over a translating gateway) reach the client
  // as the stream's trailers.
  std::weak_ptr<H2Stream> weak = s;
  ex.onResponseTrailers([this, weak](TrailerFields fields) {
    if (auto st = weak.lock()) takeTrailers(*st, h2Fields(std::move(fields)));
  });
  co_await ex.next(true);
}

net::awaitable<void> H2Server::viaH2(std::shared_ptr<H2Stream> s) {
  auto u = std::make_shared<H2UpStream>(ex_);
  if (h2pipe::socketPair(u->exchange_side, u->glue_side)) {
    u->te_trailers = s->te_trailers;
    std::weak_ptr<H2Stream> weak = s;
    u->on_trailers = [this, weak](H2Headers t) {
      if (auto st = weak.lock()) takeTrailers(*st, std::move(t));
    };
  }
  H2Link link(t_.conn, t_.h2_upstream, *u);
  Exchange<tcp::socket, tcp::socket> ex(s->conn, s->exchange_side, s->watch, s->buf);
  ex.carry(Carrier::kInspected, &link, &t_.target);
  // The client's request trailers (searched by the exchange) go out as the upstream stream's.
  std::weak_ptr<H2UpStream> weak_up = u;
  ex.onRequestTrailers([weak_up](TrailerFields fields) {
    auto up = weak_up.lock();
    if (!up) return;
    up->request.trailers = h2Fields(std::move(fields));
    up->request.has_trailers = !up->request.trailers.empty();
  });
  co_await ex.next(true);
  ErrorCode ignored;
  u->exchange_side.close(ignored);
  u->watch.timer.cancel();
}

// The upstream's trailers (grpc-status...) for the client's stream, redacted like every
// response header; sent when its body has gone.
void H2Server::takeTrailers(H2Stream& s, H2Headers trailers) {
  http::fields f;
  for (const auto& t : trailers) f.insert(t.name, t.value);
  if (redactSecrets(f, s.conn.injected, t_.conn.listener->secrets.get())) {
    log().warn("upstream {} reflected an injected secret in a trailer; redacted",
               t_.target.authority());
    trailers.clear();
    for (const auto& x : f)
      trailers.push_back({lowerName(x.name_string()), std::string(x.value())});
  }
  s.response.trailers = std::move(trailers);
  s.response.has_trailers = true;
}

// The request's bytes into the exchange, as they arrive; the window opens as they are taken.
net::awaitable<void> H2Server::feed(std::shared_ptr<H2Server> self, std::shared_ptr<H2Stream> s) {
  co_await h2pipe::feed(s->glue_side, s->request, *self->session_, s->id, self->out_, s->closed);
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
    if (body && !co_await h2pipe::pumpBody(s->glue_side, buf, p, s->response, *self->session_,
                                           s->id, self->out_, s->closed))
      self->fail(*s);
    co_return;
  }
}

}  // namespace

std::shared_ptr<H2Front> makeH2Front(H2Tunnel tunnel) {
  return std::make_shared<H2Server>(std::move(tunnel));
}

}  // namespace sluice::proxy
