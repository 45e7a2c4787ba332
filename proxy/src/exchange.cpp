// The one request pipeline, first half (exchange.hpp): reading a request, its target and
// canonical form, the decision, refusals. Instantiated for plain TCP and for TLS streams.
#include "exchange.hpp"

#include "admission.hpp"
#include "exchange_detail.hpp"
#include "http_rules.hpp"
#include "injection.hpp"
#include "log.hpp"
#include "sluice/base/net_tls.hpp"

namespace sluice::proxy {

namespace {

using policy::Reason;
using namespace exchange_detail;

constexpr std::size_t kReadChunk = 8 * 1024;

bool isWebSocketUpgrade(const http::request_header<PmrFields>& req) {
  if (!iequals(req[http::field::upgrade], "websocket")) return false;
  for (auto token : http::token_list{req[http::field::connection]})
    if (iequals(token, "upgrade")) return true;
  return false;
}

// RFC 9110 9.3: these methods define no meaning for a body (the admission refuses one unless a
// rule allows it).
bool bodylessMethod(http::verb v) {
  return v == http::verb::get || v == http::verb::head || v == http::verb::options ||
         v == http::verb::trace;
}

}  // namespace

template <typename Client, typename Upstream>
struct Exchange<Client, Upstream>::Located {
  policy::Target target;
  std::string origin;  // origin-form target as sent: path and query
};

template <typename Client, typename Upstream>
Exchange<Client, Upstream>::Exchange(ConnState& conn, Client& client, Watch& client_watch,
                                     beast::flat_buffer& client_buf)
    : conn_(conn), client_(client), watch_(client_watch), buf_(client_buf) {}

template <typename Client, typename Upstream>
Exchange<Client, Upstream>::~Exchange() = default;

template <typename Client, typename Upstream>
void Exchange<Client, Upstream>::carry(Carrier carrier, UpstreamLink<Upstream>* link,
                                       const policy::Target* tunnel_target) {
  carrier_ = carrier;
  link_ = link;
  tunnel_target_ = tunnel_target;
}

template <typename Client, typename Upstream>
net::awaitable<typename Exchange<Client, Upstream>::Next> Exchange<Client, Upstream>::next(
    bool first) {
  auto& ctx = *conn_.ctx;
  if (conn_.aborted || (!first && ctx.draining.load())) co_return Next::kClose;
  std::size_t header_len = 0;
  Refusal refused;
  auto st = co_await readHeader(first, header_len, refused);
  if (st == ReadStatus::kClosed) co_return Next::kClose;
  // Decided, and its rows stamped, by the policy in force when the request arrived (not when
  // a kept-alive connection began to wait for it): a live update applies to the next request.
  conn_.adopt(conn_.listener->policy());
  if (st == ReadStatus::kRefused) {
    co_await refuse(nullptr, "", "", refused, false);
    co_return Next::kClose;
  }
  if (auto r = parseHeader(header_len)) {
    co_await refuse(nullptr, clip(req_parser_->get().method_string()),
                    clip(req_parser_->get().target()), *r, false);
    co_return Next::kClose;
  }
  if (req_parser_->get().method() == http::verb::connect) {
    if (carrier_ == Carrier::kPlainHttp) co_return Next::kConnect;
    Refusal r = refusal(Reason::kInvalidRequest, "CONNECT inside a tunnel");
    co_await refuse(tunnel_target_, "CONNECT", "", r, false);
    co_return Next::kClose;
  }
  const auto& req = req_parser_->get();
  auto loc = locate();
  if (!loc) {
    co_await refuse(tunnel_target_, clip(req.method_string()), clip(req.target()), loc.error(),
                    false);
    co_return Next::kClose;
  }
  const auto method = req.method_string();
  auto canon =
      policy::canonicalRequest(std::string_view(method.data(), method.size()), loc->origin);
  if (!canon) {
    Refusal r = refusal(canon.error().reason, canon.error().detail);
    co_await refuse(&loc->target, clip(method), clip(loc->origin), r, false);
    co_return Next::kClose;
  }
  // From here on the request itself is well-formed: a refusal can keep the connection when
  // no request body is left unread.
  const bool keep = req.keep_alive() && !ctx.draining.load() && req_parser_->is_done();
  const Candidate c{loc->target, &*canon, carrier_ != Carrier::kInspected,
                    !req_parser_->is_done() && bodylessMethod(req.method())};
  auto admitted = co_await admit(conn_, beast::get_lowest_layer(client_), c, *link_);
  if (!admitted) {
    // A failed audit store does not come back for this connection's next request.
    const bool go_on = keep && admitted.error().reason != Reason::kAuditUnavailable;
    co_await refuse(&loc->target, canon->method, canon->path, admitted.error(), go_on);
    co_return go_on ? Next::kContinue : Next::kClose;
  }
  const bool more = co_await forward(loc->target, *canon, admitted->decision,
                                     !admitted->approval.empty(), isWebSocketUpgrade(req));
  co_return more ? Next::kContinue : Next::kClose;
}

// Reads one request header into buf_, enforcing the deadline, the size limit and the raw
// checks. On kOk, buf_ starts with `header_len` bytes of header.
template <typename Client, typename Upstream>
net::awaitable<typename Exchange<Client, Upstream>::ReadStatus>
Exchange<Client, Upstream>::readHeader(bool first, std::size_t& header_len, Refusal& refused) {
  const auto& opt = conn_.ctx->options;
  const std::size_t max = opt.max_header_bytes;
  auto& sock = beast::get_lowest_layer(client_);
  // A fresh connection gets the header deadline; a kept-alive one may wait idle for the
  // next request, then gets the header deadline from its first byte.
  bool waiting_first_byte = !first && buf_.size() == 0;
  if (waiting_first_byte && conn_.ctx->draining.load()) co_return ReadStatus::kClosed;
  auto deadline = Clock::now() + (waiting_first_byte ? opt.idle_timeout : opt.header_timeout);
  auto too_large = [&] {
    return refusal(Reason::kHeaderTooLarge,
                   "request header exceeds " + std::to_string(max) + " bytes");
  };
  for (;;) {
    auto data = buf_.data();
    std::string_view sv(static_cast<const char*>(data.data()), data.size());
    // RFC 9112 2.2: ignore empty lines before the request line.
    std::size_t skip = 0;
    while (skip + 1 < sv.size() && sv[skip] == '\r' && sv[skip + 1] == '\n') skip += 2;
    if (skip) {
      buf_.consume(skip);
      continue;
    }
    conn_.idle = waiting_first_byte && sv.empty();
    if (!sv.empty() && waiting_first_byte) {
      waiting_first_byte = false;
      deadline = Clock::now() + opt.header_timeout;
    }
    auto end = sv.find("\r\n\r\n");
    if (end != std::string_view::npos) {
      header_len = end + 4;
      if (header_len > max + 4) {
        refused = too_large();
        co_return ReadStatus::kRefused;
      }
      if (auto problem = checkHeaderBlock(sv.substr(0, header_len))) {
        refused = refusal(Reason::kInvalidRequest, *problem);
        co_return ReadStatus::kRefused;
      }
      co_return ReadStatus::kOk;
    }
    if (sv.size() > max) {
      refused = too_large();
      co_return ReadStatus::kRefused;
    }
    // A trailing CR may be the first half of a CRLF still in flight.
    auto partial = sv;
    if (!partial.empty() && partial.back() == '\r') partial.remove_suffix(1);
    if (auto problem = checkHeaderBlock(partial)) {
      refused = refusal(Reason::kInvalidRequest, *problem);
      co_return ReadStatus::kRefused;
    }
    ErrorCode ec;
    std::size_t n = 0;
    {
      Deadline d(watch_, sock, deadline, [this] { return conn_.keep_alive(); });
      n = co_await client_.async_read_some(buf_.prepare(kReadChunk),
                                           net::redirect_error(net::use_awaitable, ec));
      if (ec && d.fired()) ec = net::error::timed_out;
    }
    buf_.commit(n);
    conn_.idle = false;
    if (ec == net::error::timed_out) {
      if (buf_.size() == 0) co_return ReadStatus::kClosed;  // idle keep-alive: just close
      refused =
          refusal(Reason::kHeaderTimeout, "request header not complete within " +
                                              std::to_string(opt.header_timeout.count()) + " ms");
      co_return ReadStatus::kRefused;
    }
    if (ec && !peerGone(ec) && buf_.size() == 0) co_return ReadStatus::kClosed;
    if (ec && buf_.size() > 0) {
      refused =
          refusal(Reason::kInvalidRequest, "connection closed in the middle of a request header");
      co_return ReadStatus::kRefused;
    }
    if (ec) co_return ReadStatus::kClosed;
  }
}

// The largest request body: the proxy's max_body_bytes, or the workflow's max_bytes_out when
// that is larger. A body streams through (only a step that needs it whole reads it, at most
// request_body.hpp's bound), and max_bytes_out counts every byte that leaves, so a policy that
// allows a multi-GiB upload (SigV4 streaming, say) is not stopped at the default.
template <typename Client, typename Upstream>
std::uint64_t Exchange<Client, Upstream>::bodyLimit() const {
  return std::max<std::uint64_t>(conn_.ctx->options.max_body_bytes,
                                 conn_.workflow().limits.max_bytes_out);
}

template <typename Client, typename Upstream>
std::optional<Refusal> Exchange<Client, Upstream>::parseHeader(std::size_t header_len) {
  const auto& opt = conn_.ctx->options;
  // Parsers cannot be reset; re-emplacing the member avoids a heap block per request.
  auto& p = req_parser_.emplace(std::piecewise_construct, std::make_tuple(),
                                std::make_tuple(PmrAllocator(&pool_)));
  p.header_limit(static_cast<std::uint32_t>(opt.max_header_bytes + 4));
  p.body_limit(bodyLimit());
  ErrorCode ec;
  auto used = p.put(net::buffer(buf_.data().data(), header_len), ec);
  buf_.consume(ec ? header_len : used);
  if (ec == http::error::body_limit)
    return refusal(Reason::kBodyTooLarge,
                   "request body exceeds " + std::to_string(bodyLimit()) + " bytes");
  if (ec || !p.is_header_done())
    return refusal(Reason::kInvalidRequest,
                   "malformed request: " + (ec ? ec.message() : std::string("incomplete header")));
  return checkFraming(p.get(), p.get().version());
}

// The target a request names. Plain HTTP: absolute-form; the Host field is replaced by the
// target's authority (RFC 9112 3.2.2: a proxy ignores a Host that differs). Tunnels:
// origin-form (Host must name the tunnel's target) or absolute-form naming that target.
template <typename Client, typename Upstream>
auto Exchange<Client, Upstream>::locate() -> std::expected<Located, Refusal> {
  const auto& req = req_parser_->get();
  const std::string raw(req.target());
  auto bad_target = [&](std::string why) {
    return std::unexpected(refusal(Reason::kInvalidTarget, std::move(why)));
  };
  if (req.count(http::field::host) > 1)
    return std::unexpected(refusal(Reason::kInvalidRequest, "several Host fields"));
  const bool origin_form = !raw.empty() && raw.front() == '/';
  if (carrier_ == Carrier::kPlainHttp) {
    if (origin_form)
      return bad_target(
          "request target is origin-form; a proxy needs absolute-form "
          "(http://host/path)");
    auto url = policy::parseUrl(raw);
    if (!url) return bad_target("request target does not parse: " + url.error());
    if (url->scheme != "http") return bad_target("https:// URLs must be tunnelled with CONNECT");
    return Located{std::move(url->target),
                   url->query.empty() ? url->path : url->path + "?" + url->query};
  }
  const policy::Target& t = *tunnel_target_;
  const bool tls = carrier_ == Carrier::kInspected;
  if (origin_form) {
    if (auto problem = checkHostAgrees(req, t, tls ? 443 : 80))
      return std::unexpected(
          refusal(Reason::kHostMismatch, *problem + " (domain fronting refused)"));
    return Located{t, raw};
  }
  auto url = policy::parseUrl(raw);
  if (!url || url->scheme != (tls ? "https" : "http") || url->target.host != t.host ||
      url->target.port != t.port)
    return std::unexpected(refusal(
        Reason::kHostMismatch,
        "request target '" + clip(raw) + "' does not name the CONNECT target " + t.authority()));
  return Located{t, url->query.empty() ? url->path : url->path + "?" + url->query};
}

template <typename Client, typename Upstream>
net::awaitable<bool> Exchange<Client, Upstream>::writeClient(std::string_view bytes) {
  ErrorCode ec;
  Deadline d(watch_, beast::get_lowest_layer(client_),
             Clock::now() + conn_.ctx->options.upstream_timeout,
             [this] { return conn_.keep_alive(); });
  co_await net::async_write(client_, net::buffer(bytes.data(), bytes.size()),
                            net::redirect_error(net::use_awaitable, ec));
  co_return !ec;
}

// Everything of a response header that reaches the sandbox is searched for the secrets
// injected on this connection: every field value, and the status line's reason phrase.
// `upstream` (null: unnamed) is only spelled out for the warning.
template <typename Client, typename Upstream>
void Exchange<Client, Upstream>::redact(http::response_header<PmrFields>& head,
                                        const policy::Target* upstream) {
  const auto* secrets = conn_.listener->secrets.get();
  const auto& minted = conn_.minted.values;
  if ((conn_.injected.empty() || !secrets) && minted.empty()) return;
  bool hit = redactSecrets(static_cast<PmrFields&>(head), conn_.injected, secrets, minted);
  if (containsSecret(std::string_view(head.reason().data(), head.reason().size()), conn_.injected,
                     secrets, minted)) {
    head.reason(http::obsolete_reason(head.result()));
    hit = true;
  }
  if (hit)
    log().warn("upstream {} reflected an injected secret in a response header; redacted",
               upstream ? upstream->authority() : std::string("upstream"));
}

template <typename Client, typename Upstream>
std::string Exchange<Client, Upstream>::refusalConnection(const policy::Target* target,
                                                          const Refusal& r,
                                                          const audit::PolicyStamp& request) {
  return link_ ? link_->refusedConnection(target, r, request) : std::string();
}

template <typename Client, typename Upstream>
net::awaitable<void> Exchange<Client, Upstream>::refuse(const policy::Target* target,
                                                        const std::string& method,
                                                        const std::string& path, const Refusal& r,
                                                        bool keep_alive) {
  const std::string host = target ? target->host : std::string();
  {
    RequestRecord rec(*conn_.ctx, *conn_.listener, conn_.account(), conn_.workflow(), "", method,
                      host, path, conn_.generation);
    rec.decided(false, r.rule, r.reason);
    rec.at("", carrier_ != Carrier::kInspected);  // the refusal's address, if it has one
    rec.refused(r);
    if (target) rec.setPort(target->port);
    rec.setConnection(refusalConnection(target, r, rec.shadow()));
  }
  log().info("deny {} {}{} rule={} reason={}: {}", method.empty() ? "-" : method,
             target ? target->authority() : std::string("-"), path, r.rule.empty() ? "-" : r.rule,
             r.reasonText(), r.detail);
  std::string text = renderRefusal(r, conn_.workflow().name, keep_alive);
  co_await writeClient(text);
}

using SslStream = beast::ssl_stream<tcp::socket>;
template class Exchange<tcp::socket, tcp::socket>;
template class Exchange<SslStream, SslStream>;
template class Exchange<tcp::socket, SslStream>;  // an HTTP/2 stream's (h2_exchange.hpp)

}  // namespace sluice::proxy
