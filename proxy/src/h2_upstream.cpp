// The HTTP/2 upstream session of an inspected tunnel (h2_upstream.hpp).
#include "h2_upstream.hpp"

#include "log.hpp"
#include "upstream_dial.hpp"

namespace sluice::proxy {

namespace {

using h2pipe::connectionSpecific;
using h2pipe::lowerName;

constexpr std::size_t kWriteBytes = 64 * 1024;

// The HTTP/2 header block of the request the exchange wrote (RFC 9113 8.3.1): the pipeline set
// Host to the CONNECT target's authority and the target to the canonical path it judged.
H2Headers requestHeaders(const http::request_header<>& r, bool te_trailers) {
  H2Headers h{{":method", std::string(r.method_string())},
              {":scheme", "https"},
              {":authority", std::string(r[http::field::host])},
              {":path", std::string(r.target())}};
  for (const auto& f : r) {
    auto name = lowerName(f.name_string());
    if (connectionSpecific(name)) continue;
    h.push_back({std::move(name), std::string(f.value())});
  }
  if (te_trailers) h.push_back({"te", "trailers"});
  return h;
}

std::string statusLine(std::string_view status) {
  auto code = static_cast<unsigned>(std::atoi(std::string(status).c_str()));
  return "HTTP/1.1 " + std::string(status) + " " +
         std::string(http::obsolete_reason(http::int_to_status(code))) + "\r\n";
}

}  // namespace

struct H2Upstream::Owned {
  Owned(const net::any_io_executor& ex, net::ssl::context& tls) : stream(ex, tls), watch(ex) {}
  SslStream stream;
  Watch watch;
};

H2Upstream::H2Upstream(ConnState& conn, std::unique_ptr<Owned> owned, const policy::Target& target,
                       policy::IpAddress vetted, audit::ConnectionEvent& row)
    : H2Upstream(conn, owned->stream, owned->watch, target, vetted, row) {
  owned_ = std::move(owned);
}

// A dialled connection holds a slot of max_connections (the tunnel's own is the tunnel's).
H2Upstream::~H2Upstream() {
  if (owned_) conn_.account().releaseConnection();
}

net::awaitable<std::expected<std::pair<VettedAddress, std::shared_ptr<H2Upstream>>, Refusal>>
H2Upstream::dial(ConnState& conn, const std::vector<VettedAddress>& addrs,
                 const policy::Target& target, const std::string& rule_id,
                 audit::ConnectionEvent& row) {
  auto& ctx = conn.ctx;
  auto ex = co_await net::this_coro::executor;
  auto owned = std::make_unique<Owned>(ex, ctx->tls->upstream);
  auto dialled = co_await dialVetted(ctx, owned->stream.next_layer(), owned->watch, addrs, target,
                                     rule_id, conn.keep_alive());
  if (!dialled) co_return std::unexpected(std::move(dialled.error()));
  auto refused = co_await upstreamTlsHandshake(owned->stream, owned->watch, target,
                                               ctx->options.connect_timeout, conn.keep_alive,
                                               rule_id, /*offer_h2=*/true);
  if (refused) co_return std::unexpected(std::move(*refused));
  if (negotiatedAlpn(owned->stream) != "h2")
    co_return std::unexpected(
        refusal(policy::Reason::kUpstreamError,
                "upstream " + target.authority() + " no longer offers HTTP/2 on a new connection",
                rule_id));
  auto up = std::shared_ptr<H2Upstream>(
      new H2Upstream(conn, std::move(owned), target, dialled->address, row));
  net::co_spawn(ex, run(up), LogEscapedException{"h2 upstream"});
  co_return std::pair{std::move(*dialled), std::move(up)};
}

H2Upstream::H2Upstream(ConnState& conn, SslStream& stream, Watch& watch,
                       const policy::Target& target, policy::IpAddress vetted,
                       audit::ConnectionEvent& row)
    : conn_(conn),
      stream_(stream),
      watch_(watch),
      target_(target),
      vetted_(vetted),
      row_(row),
      ex_(stream.get_executor()),
      read_watch_(ex_),
      out_(ex_) {
  session_ = H2Session::client(*this, H2Limits{});
}

net::awaitable<void> H2Upstream::run(std::shared_ptr<H2Upstream> self) {
  if (!self->session_) co_return;
  net::co_spawn(self->ex_, readLoop(self), LogEscapedException{"h2 upstream reader"});
  co_await self->writeFrames();
  self->close();
  while (!self->reader_done_) co_await self->out_.wait();
  for (auto& [id, u] : self->streams_) {
    u->closed = true;
    ErrorCode ignored;
    u->glue_side.close(ignored);
    u->request.wake.notify();
    u->response.wake.notify();
  }
  self->streams_.clear();
}

void H2Upstream::close() {
  ended_ = true;
  ErrorCode ignored;
  stream_.next_layer().cancel(ignored);
  out_.notify();
}

net::awaitable<void> H2Upstream::readLoop(std::shared_ptr<H2Upstream> self) {
  std::string buf(h2pipe::kReadBytes, '\0');
  while (!self->ended_) {
    ErrorCode ec;
    auto n = co_await self->stream_.async_read_some(net::buffer(buf),
                                                    net::redirect_error(net::use_awaitable, ec));
    if (ec) break;
    const bool ok = self->session_->recv(std::string_view(buf.data(), n));
    self->out_.notify();
    if (!ok) break;
  }
  self->ended_ = true;
  self->reader_done_ = true;
  self->out_.notify();
}

net::awaitable<void> H2Upstream::writeFrames() {
  std::string out;
  for (;;) {
    out.clear();
    if (!session_->send(out, kWriteBytes)) break;
    if (!out.empty()) {
      ErrorCode ec;
      Deadline d(watch_, stream_.next_layer(), Clock::now() + conn_.ctx->options.upstream_timeout,
                 [this] { return conn_.keep_alive(); });
      co_await net::async_write(stream_, net::buffer(out),
                                net::redirect_error(net::use_awaitable, ec));
      if (ec) break;
      continue;
    }
    if (ended_ || (!session_->wantRead() && !session_->wantWrite())) break;
    co_await out_.wait();
    // Let the other streams' ready work queue its frames too: they leave in one write.
    co_await net::post(ex_, net::use_awaitable);
  }
}

void H2Upstream::start(std::shared_ptr<H2UpStream> u) {
  net::co_spawn(ex_, send(shared_from_this(), std::move(u)),
                LogEscapedException{"h2 upstream stream"});
}

// The exchange's request, read back from the pair and submitted as a stream; its body follows
// through the data provider. Then the response comes back into the pair (feed).
net::awaitable<void> H2Upstream::send(std::shared_ptr<H2Upstream> self,
                                      std::shared_ptr<H2UpStream> u) {
  http::request_parser<http::buffer_body> p;
  p.body_limit(std::numeric_limits<std::uint64_t>::max());
  ErrorCode ec;
  co_await http::async_read_header(u->glue_side, u->glue_buf, p,
                                   net::redirect_error(net::use_awaitable, ec));
  if (ec) co_return;  // nothing was sent: a refused request
  const bool body = !p.is_done();
  const auto id =
      self->usable() ? self->session_->request(requestHeaders(p.get(), u->te_trailers), body) : -1;
  if (id < 0) {
    // The session is gone or refuses new streams: the exchange sees its upstream fail (502).
    u->glue_side.close(ec);
    co_return;
  }
  u->id = id;
  self->streams_[id] = u;
  self->out_.notify();
  net::co_spawn(self->ex_, receive(self, u), LogEscapedException{"h2 upstream response"});
  if (body && !co_await h2pipe::pumpBody(u->glue_side, u->glue_buf, p, u->request, *self->session_,
                                         id, self->out_, u->closed)) {
    if (!u->closed) self->session_->reset(id, NGHTTP2_CANCEL);
    self->out_.notify();
  }
}

// The response into the pair, as it arrives (the window opens as the exchange takes it).
net::awaitable<void> H2Upstream::receive(std::shared_ptr<H2Upstream> self,
                                         std::shared_ptr<H2UpStream> u) {
  co_await h2pipe::feed(u->glue_side, u->response, *self->session_, u->id, self->out_, u->closed);
}

void H2Upstream::onHeaders(std::int32_t id, H2Headers headers, bool end_stream, bool) {
  auto u = find(id);
  if (!u) return;
  if (!u->responded) {
    responseHead(*u, headers, end_stream);
    return;
  }
  if (u->on_trailers) u->on_trailers(headers);
  u->response.end(nullptr);
}

// A response header block into the pair as HTTP/1.1: interim ones as they come; the final one
// with its framing (Content-Length as sent, else chunked; none when it ends here).
void H2Upstream::responseHead(H2UpStream& u, const H2Headers& headers, bool end_stream) {
  const auto status = h2Value(headers, ":status");
  std::string text = statusLine(status);
  bool has_length = false;
  for (const auto& f : headers) {
    if (f.name.empty() || f.name[0] == ':' || connectionSpecific(f.name)) continue;
    has_length = has_length || f.name == "content-length";
    text += f.name + ": " + f.value + "\r\n";
  }
  if (!status.empty() && status[0] == '1') {
    u.response.bytes += text + "\r\n";
    u.response.wake.notify();
    return;
  }
  u.responded = true;
  u.response.chunked = !end_stream && !has_length;
  if (u.response.chunked) text += "transfer-encoding: chunked\r\n";
  if (end_stream && !has_length) text += "content-length: 0\r\n";
  u.response.bytes += text + "\r\n";
  if (end_stream) u.response.end(nullptr);
  u.response.wake.notify();
}

void H2Upstream::onData(std::int32_t id, std::string_view data) {
  auto u = find(id);
  if (!u || u->response.failed) {
    session_->consume(id, data.size());
    return;
  }
  u->response.data(data);
}

void H2Upstream::onEndStream(std::int32_t id) {
  if (auto u = find(id)) u->response.end(nullptr);
}

void H2Upstream::onClose(std::int32_t id, std::uint32_t error_code) {
  auto u = find(id);
  if (!u) return;
  streams_.erase(id);
  if (!u->response.ended || error_code != 0) {
    // The upstream reset the stream or went away before the response ended: the exchange
    // sees its upstream fail (502 before a response header, a cut-off body after).
    log().info("upstream {} closed HTTP/2 stream {} early (error {})", target_.authority(), id,
               error_code);
    u->closed = true;
    ErrorCode ignored;
    u->glue_side.close(ignored);
  }
  u->request.wake.notify();
  u->response.wake.notify();
}

H2Chunk H2Upstream::readBody(std::int32_t id, std::uint8_t* out, std::size_t max) {
  auto u = find(id);
  if (!u) return H2Chunk{0, false, true, false};
  return u->request.read(*session_, id, out, max);
}

const policy::IpAddress* H2Link::openTo(const policy::Target& target) {
  const auto& t = current_->target();
  if (!current_->usable() || target.host != t.host || target.port != t.port) return nullptr;
  return &current_->vetted();
}

net::awaitable<std::expected<VettedAddress, Refusal>> H2Link::dial(
    const std::vector<VettedAddress>& addrs, const policy::Target& target,
    const std::string& rule_id) {
  auto opened = co_await H2Upstream::dial(conn_, addrs, target, rule_id, row_);
  if (!opened) co_return std::unexpected(std::move(opened.error()));
  // The old session (GOAWAY, or its connection gone) ends by itself with its last stream.
  current_ = std::move(opened->second);
  co_return std::move(opened->first);
}

}  // namespace sluice::proxy
