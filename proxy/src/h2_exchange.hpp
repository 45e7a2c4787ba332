// HTTP/2 inside an inspected tunnel. When the client picked h2 in ALPN, the tunnel's TLS stream
// is served by an nghttp2 server session (h2_session.hpp) driven from the tunnel's strand: one
// coroutine reads frames, one writes them. Each stream's request goes through the one request
// pipeline unchanged: it is written, as the HTTP/1.1 request it means (":method :path",
// Host = ":authority", the fields, the body chunked unless it has a Content-Length), into a
// socket pair whose other end is the client stream of an ordinary inspected Exchange — so the
// Host check against the CONNECT target, the decision, approvals, budgets, injection,
// refusals, redaction and the requests row are exactly those of HTTP/1.1. The Exchange's
// answer is read back from the pair and sent as the stream's HEADERS and DATA (nghttp2's data
// provider, deferred while no bytes wait; the pair's buffers and the stream's flow-control
// window hold back whichever side is faster). A refused stream gets its refusal (403, 400...)
// as its response; its siblings go on.
#pragma once

#include <memory>

#include "exchange.hpp"
#include "tls_context.hpp"

namespace sluice::proxy {

class UpstreamPool;
class H2Upstream;

/// What the inspected tunnel lends its HTTP/2 front.
struct H2Tunnel {
  /// The tunnel whose members the references below are: kept alive while the front or any
  /// of its streams lives (a stream's exchange can end after the tunnel's own coroutine).
  /// First, so that it is released last.
  std::shared_ptr<void> owner;
  ConnState& conn;
  SslStream& client;
  Watch& client_watch;
  const policy::Target& target;
  std::shared_ptr<UpstreamPool> upstream;   // HTTP/1.1 upstream connections
  std::shared_ptr<H2Upstream> h2_upstream;  // or, when the upstream picked h2, its session
};

class H2Front {
 public:
  virtual ~H2Front() = default;
  /// Serves the client until its connection ends (or GOAWAY and the last stream).
  virtual net::awaitable<void> run() = 0;
  /// The proxy is draining: GOAWAY, and the connection ends with its last open stream.
  virtual void drain() = 0;
};

std::shared_ptr<H2Front> makeH2Front(H2Tunnel tunnel);

}  // namespace sluice::proxy
