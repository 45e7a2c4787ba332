// TLS inspection of CONNECT tunnels (see inspect.hpp). One Inspection object per tunnel owns
// both TLS streams on the connection's strand; requests are handled one at a time, each
// decided by the policy, injected, relayed with streaming bodies, and audited.
#include "inspect.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <boost/asio/ssl.hpp>
#include <boost/beast/ssl.hpp>
#include <limits>
#include <sstream>

#include "http_rules.hpp"
#include "injection.hpp"
#include "log.hpp"

namespace sluice::proxy {

namespace ssl = net::ssl;

struct TlsContexts {
  ssl::context server{ssl::context::tls_server};
  ssl::context upstream{ssl::context::tls_client};
  std::shared_ptr<CertificateAuthority> ca;
};

namespace {

using policy::Reason;
using Clock = std::chrono::steady_clock;
using SslStream = beast::ssl_stream<beast::tcp_stream>;
using ReqParser = http::request_parser<http::buffer_body>;
using RespParser = http::response_parser<http::buffer_body>;

constexpr std::size_t kBufferBytes = 16 * 1024;
constexpr unsigned char kAlpnHttp11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};

std::string reason(Reason r) { return std::string(policy::reasonName(r)); }

std::string sslError() {
  unsigned long e = ERR_get_error();
  char buf[256] = "unknown error";
  if (e != 0) ERR_error_string_n(e, buf, sizeof buf);
  ERR_clear_error();
  return buf;
}

// What the SNI callback compares against, per client connection (SSL ex_data).
struct SniCheck {
  std::string expected;  // the CONNECT host; empty for IP literals (any SNI then mismatches)
  std::string seen;
  bool mismatch = false;
};

int sniIndex() {
  static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}

// Domain fronting guard: the client's SNI must name the host it asked to CONNECT to.
int onServerName(SSL* ssl, int* alert, void*) {
  auto* check = static_cast<SniCheck*>(SSL_get_ex_data(ssl, sniIndex()));
  const char* name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
  if (!check || !name) return SSL_TLSEXT_ERR_OK;  // no SNI: Host is still checked per request
  auto normalized = policy::normalizeHostName(name);
  if (normalized && *normalized == check->expected) return SSL_TLSEXT_ERR_OK;
  check->mismatch = true;
  check->seen = std::string(name).substr(0, 255);
  *alert = SSL_AD_UNRECOGNIZED_NAME;
  return SSL_TLSEXT_ERR_ALERT_FATAL;
}

// We speak HTTP/1.1 inside the tunnel: pick it when offered; when a client offers only h2,
// go on without ALPN so it falls back to HTTP/1.1.
int onAlpn(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
           unsigned int inlen, void*) {
  unsigned char* selected = nullptr;
  if (SSL_select_next_proto(&selected, outlen, kAlpnHttp11, sizeof kAlpnHttp11, in, inlen) ==
      OPENSSL_NPN_NEGOTIATED) {
    *out = selected;
    return SSL_TLSEXT_ERR_OK;
  }
  return SSL_TLSEXT_ERR_NOACK;
}

bool isWebSocketUpgrade(const http::request<http::buffer_body>& req) {
  auto up = req[http::field::upgrade];
  if (!beast::iequals(up, "websocket")) return false;
  for (auto token : http::token_list{req[http::field::connection]}) {
    if (beast::iequals(token, "upgrade")) return true;
  }
  return false;
}

policy::IpAddress toIp(const tcp::endpoint& ep) {
  if (ep.address().is_v4()) return policy::IpAddress::v4(ep.address().to_v4().to_uint());
  std::array<std::uint8_t, 16> b{};
  auto bytes = ep.address().to_v6().to_bytes();
  std::copy(bytes.begin(), bytes.end(), b.begin());
  return policy::IpAddress::v6(b);
}

class Inspection : public std::enable_shared_from_this<Inspection>, public Closable {
 public:
  Inspection(std::shared_ptr<Context> ctx, std::shared_ptr<Listener> listener,
             std::shared_ptr<const policy::Matcher> matcher, tcp::socket client,
             tcp::socket upstream, InspectStart start)
      : ctx_(std::move(ctx)),
        listener_(std::move(listener)),
        account_(listener_->account),
        matcher_(std::move(matcher)),
        start_(std::move(start)),
        vetted_(toIp(start_.upstream_endpoint)),
        event_(start_.event),
        client_(std::move(client), ctx_->tls->server),
        upstream_(std::move(upstream), ctx_->tls->upstream),
        started_(Clock::now()) {
    ctx_->live.fetch_add(1);
  }

  ~Inspection() override {
    // One connections row per tunnel, written when it ends (allowed or refused).
    event_.duration_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started_).count();
    if (ctx_->sink) ctx_->sink->recordConnection(std::move(event_));
    account_->releaseConnection();
    account_->unregisterLive(live_id_);
    ctx_->live.fetch_sub(1);
  }

  void begin() {
    live_id_ = account_->registerLive(weak_from_this());
    net::co_spawn(client_.get_executor(), run(shared_from_this()),
                  LogEscapedException{"inspected connection"});
  }

  void abort() override {
    auto self = shared_from_this();
    net::post(client_.get_executor(), [self] { self->closeBoth(); });
  }

  void closeIfIdle() override {
    auto self = shared_from_this();
    net::post(client_.get_executor(), [self] {
      if (self->idle_) self->closeBoth();
    });
  }

 private:
  const policy::Workflow& workflow() const { return matcher_->workflow(); }
  const policy::Target& target() const { return start_.target; }

  void closeBoth() {
    ErrorCode ec;
    beast::get_lowest_layer(client_).socket().close(ec);
    beast::get_lowest_layer(upstream_).socket().close(ec);
  }

  static net::awaitable<void> run(std::shared_ptr<Inspection> self) {
    co_await self->main();
    self->closeBoth();
  }

  net::awaitable<void> main() {
    // The client's TLS comes first so that an upstream certificate failure can be answered
    // inside the tunnel, as an HTTP 502 with the reason the client's HTTP library shows.
    if (!co_await establish()) co_return;
    if (!co_await clientHandshake()) co_return;
    if (auto refusal = co_await upstreamHandshake()) {
      co_await refuseFirstRequest(*refusal);
      co_return;
    }
    bool first = true;
    while (co_await handleRequest(first)) first = false;
    if (!upgraded_) {
      ErrorCode ec;
      beast::get_lowest_layer(client_).expires_after(std::chrono::seconds(1));
      co_await client_.async_shutdown(net::redirect_error(net::use_awaitable, ec));
    }
  }

  // ---- set-up ---------------------------------------------------------------------------

  // Verified TLS to the upstream; the refusal when it fails.
  net::awaitable<std::optional<Refusal>> upstreamHandshake() {
    SSL* ssl = upstream_.native_handle();
    const auto& t = target();
    X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
    if (t.ip) {
      X509_VERIFY_PARAM_set1_ip_asc(param, t.host.c_str());
    } else {
      SSL_set_tlsext_host_name(ssl, t.host.c_str());
      X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
      X509_VERIFY_PARAM_set1_host(param, t.host.c_str(), t.host.size());
    }
    ErrorCode ec;
    beast::get_lowest_layer(upstream_).expires_after(ctx_->options.connect_timeout);
    co_await upstream_.async_handshake(ssl::stream_base::client,
                                       net::redirect_error(net::use_awaitable, ec));
    beast::get_lowest_layer(upstream_).expires_never();
    if (!ec) co_return std::nullopt;
    std::string detail;
    long verify = SSL_get_verify_result(ssl);
    if (verify != X509_V_OK) {
      detail = "upstream certificate verification failed for " + t.authority() + ": " +
               X509_verify_cert_error_string(verify);
    } else if (ec == beast::error::timeout) {
      detail = "TLS handshake with upstream " + t.authority() + " timed out";
    } else {
      detail = "TLS handshake with upstream " + t.authority() + " failed: " + ec.message();
    }
    ERR_clear_error();
    co_return Refusal{
        ec == beast::error::timeout ? http::status::gateway_timeout : http::status::bad_gateway,
        "upstream_tls", reason(Reason::kUpstreamError), start_.decision.rule_id, detail};
  }

  // The upstream cannot be trusted: the connection row says why, and the client's first
  // request inside the tunnel is answered with the refusal.
  net::awaitable<void> refuseFirstRequest(const Refusal& r) {
    event_.decision = "deny";
    event_.rule_id = r.rule;
    event_.reason = r.reason;
    event_.detail = r.detail;
    log().info("deny connect {} rule={} reason={}: {}", target().authority(),
               r.rule.empty() ? "-" : r.rule, r.reason, r.detail);
    ReqParser p;
    p.header_limit(static_cast<std::uint32_t>(ctx_->options.max_header_bytes));
    ErrorCode ec;
    beast::get_lowest_layer(client_).expires_after(ctx_->options.header_timeout);
    co_await http::async_read_header(client_, cbuf_, p,
                                     net::redirect_error(net::use_awaitable, ec));
    std::string method = ec ? std::string() : std::string(p.get().method_string());
    std::string path = ec ? std::string() : std::string(p.get().target()).substr(0, 255);
    if (auto q = path.find('?'); q != std::string::npos) path.resize(q);
    co_await refuse(r, method, path, false);
  }

  net::awaitable<bool> establish() {
    static constexpr std::string_view kEstablished = "HTTP/1.1 200 Connection established\r\n\r\n";
    ErrorCode ec;
    auto& raw = beast::get_lowest_layer(client_);
    raw.expires_after(ctx_->options.upstream_timeout);
    co_await net::async_write(raw, net::buffer(kEstablished),
                              net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return false;
    account_->noteAllowed();
    account_->noteUpstreamConnection();
    co_return true;
  }

  net::awaitable<bool> clientHandshake() {
    const auto& t = target();
    auto leaf = ctx_->tls->ca->leafFor(t.host);
    if (!leaf) {
      event_.reason = "tls_error";
      event_.detail = "cannot mint a certificate for " + t.host + ": " + leaf.error();
      log().error("{}", event_.detail);
      co_return false;
    }
    SSL* ssl = client_.native_handle();
    if (SSL_use_certificate(ssl, (*leaf)->certificate()) != 1 ||
        SSL_use_PrivateKey(ssl, (*leaf)->privateKey()) != 1) {
      event_.reason = "tls_error";
      event_.detail = "cannot use the minted certificate: " + sslError();
      co_return false;
    }
    sni_.expected = t.ip ? std::string() : t.host;
    SSL_set_ex_data(ssl, sniIndex(), &sni_);
    ErrorCode ec;
    beast::get_lowest_layer(client_).expires_after(ctx_->options.header_timeout);
    if (start_.early.empty()) {
      co_await client_.async_handshake(ssl::stream_base::server,
                                       net::redirect_error(net::use_awaitable, ec));
    } else {
      // The client sent its ClientHello before reading our 200: hand those bytes to OpenSSL.
      co_await client_.async_handshake(ssl::stream_base::server, net::buffer(start_.early),
                                       net::redirect_error(net::use_awaitable, ec));
    }
    SSL_set_ex_data(ssl, sniIndex(), nullptr);
    ERR_clear_error();
    if (!ec) co_return true;
    if (sni_.mismatch) {
      event_.decision = "deny";
      event_.reason = reason(Reason::kHostMismatch);
      event_.detail = "TLS SNI '" + sni_.seen + "' does not name the CONNECT target " +
                      t.authority() + " (domain fronting refused)";
      account_->noteDenied(t.host, t.port, event_.rule_id, event_.reason);
      log().info("deny connect {}: {}", t.authority(), event_.detail);
    } else {
      event_.reason = "tls_handshake_failed";
      event_.detail = "client TLS handshake failed: " + ec.message();
    }
    co_return false;
  }

  // ---- requests -------------------------------------------------------------------------

  void recordRequest(const std::string& method, const std::string& path, int status, bool allowed,
                     const std::string& rule, const std::string& why,
                     std::vector<std::string> injected = {}) {
    if (!allowed) account_->noteDenied(target().host, target().port, rule, why);
    proxy::recordRequest(
        *ctx_, *listener_, workflow().name,
        {event_.id, method, target().host, path, status, allowed, rule, why, std::move(injected)});
  }

  net::awaitable<bool> refuse(const Refusal& r, const std::string& method, const std::string& path,
                              bool keep_alive) {
    recordRequest(method, path, static_cast<int>(r.status), false, r.rule, r.reason);
    log().info("deny {} https://{}{} rule={} reason={}: {}", method, target().authority(), path,
               r.rule.empty() ? "-" : r.rule, r.reason, r.detail);
    auto text = renderRefusal(r, workflow().name, keep_alive);
    ErrorCode ec;
    beast::get_lowest_layer(client_).expires_after(ctx_->options.upstream_timeout);
    co_await net::async_write(client_, net::buffer(text),
                              net::redirect_error(net::use_awaitable, ec));
    co_return keep_alive && !ec;
  }

  struct RelayResult {
    bool ok = true;
    bool input_failed = false;
    bool limit = false;
    bool header_written = false;
  };

  // Streams one message (header already parsed into `p`) from `in` to `out`; `count` sees
  // every byte written and returns false to stop at a limit.
  template <bool isRequest, typename In, typename Out, typename Count>
  net::awaitable<RelayResult> relay(In& in, beast::flat_buffer& in_buf,
                                    http::parser<isRequest, http::buffer_body>& p, Out& out,
                                    Count count) {
    RelayResult res;
    const auto timeout = ctx_->options.upstream_timeout;
    http::serializer<isRequest, http::buffer_body> sr{p.get()};
    // One body buffer per connection, reused by every message (they are relayed one at a time).
    if (!relay_buf_) relay_buf_ = std::make_unique<char[]>(kBufferBytes);
    char* const buf = relay_buf_.get();
    ErrorCode ec;
    if (!p.is_done() && in_buf.size() == 0) {
      // Nothing of the body is here yet: send the header now so the peer is not kept
      // waiting for it (streaming responses, slow uploads).
      beast::get_lowest_layer(out).expires_after(timeout);
      auto n =
          co_await http::async_write_header(out, sr, net::redirect_error(net::use_awaitable, ec));
      if (ec) {
        res.ok = false;
        co_return res;
      }
      res.header_written = true;
      if (!count(n)) {
        res.ok = false;
        res.limit = true;
        co_return res;
      }
    }
    while (!sr.is_done()) {
      if (!p.is_done()) {
        offerBodyBuffer(p, buf, kBufferBytes);
        beast::get_lowest_layer(in).expires_after(timeout);
        co_await http::async_read_some(in, in_buf, p, net::redirect_error(net::use_awaitable, ec));
        if (ec == http::error::need_buffer) ec = {};
        if (ec) {
          res.ok = false;
          res.input_failed = true;
          co_return res;
        }
        if (!takeBodyBytes(p, buf, kBufferBytes)) continue;
      } else {
        endBody(p);
      }
      beast::get_lowest_layer(out).expires_after(timeout);
      auto n = co_await http::async_write(out, sr, net::redirect_error(net::use_awaitable, ec));
      if (ec == http::error::need_buffer) ec = {};
      if (ec) {
        res.ok = false;
        co_return res;
      }
      if (n) res.header_written = true;
      if (n && !count(n)) {
        res.ok = false;
        res.limit = true;
        co_return res;
      }
    }
    co_return res;
  }

  // One request inside the tunnel. Returns whether to read another.
  net::awaitable<bool> handleRequest(bool first) {
    const auto& opt = ctx_->options;
    const auto& t = target();
    const auto limits = workflow().limits;
    ReqParser p;
    p.header_limit(static_cast<std::uint32_t>(opt.max_header_bytes));
    p.body_limit(opt.max_body_bytes);
    ErrorCode ec;
    idle_ = !first;
    if (!first && ctx_->draining.load()) co_return false;
    beast::get_lowest_layer(client_).expires_after(first ? opt.header_timeout : opt.idle_timeout);
    co_await http::async_read_header(client_, cbuf_, p,
                                     net::redirect_error(net::use_awaitable, ec));
    idle_ = false;
    if (ec == http::error::end_of_stream || ec == ssl::error::stream_truncated ||
        ec == net::error::eof || ec == net::error::operation_aborted ||
        (ec == beast::error::timeout && !p.got_some())) {
      co_return false;
    }
    if (ec == http::error::header_limit) {
      Refusal r{http::status::request_header_fields_too_large, "too_large", "header_too_large", "",
                "request header exceeds " + std::to_string(opt.max_header_bytes) + " bytes"};
      co_return co_await refuse(r, "", "", false);
    }
    if (ec == beast::error::timeout) {
      Refusal r{http::status::request_timeout, "timeout", "header_timeout", "",
                "request header not received within " + std::to_string(opt.header_timeout.count()) +
                    " ms"};
      co_return co_await refuse(r, "", "", false);
    }
    if (ec) {
      Refusal r{http::status::bad_request, "bad_request", "invalid_request", "",
                "malformed request: " + ec.message()};
      co_return co_await refuse(r, "", "", false);
    }
    auto& req = p.get();
    const std::string method(req.method_string());
    std::string raw(req.target());
    std::string path, query;
    if (!raw.empty() && raw.front() == '/') {
      auto q = raw.find('?');
      path = raw.substr(0, q);
      if (q != std::string::npos) query = raw.substr(q + 1);
    } else {
      auto url = policy::parseUrl(raw);
      if (!url || url->scheme != "https" || url->target.host != t.host ||
          url->target.port != t.port) {
        Refusal r{http::status::bad_request, "bad_request", reason(Reason::kHostMismatch), "",
                  "request target '" + raw.substr(0, 255) + "' does not name the CONNECT target " +
                      t.authority()};
        co_return co_await refuse(r, method, raw.substr(0, 255), false);
      }
      path = url->path;
      query = url->query;
    }
    const bool body_pending = !p.is_done();
    bool client_keep = req.keep_alive() && !ctx_->draining.load();
    const bool can_keep = client_keep && !body_pending;
    if (auto r = checkFraming(req)) co_return co_await refuse(*r, method, path, false);
    if (auto problem = checkHostAgrees(req, t, 443)) {
      Refusal r{http::status::bad_request, "bad_request", reason(Reason::kHostMismatch), "",
                *problem + " (domain fronting refused)"};
      co_return co_await refuse(r, method, path, false);
    }
    if (!ctx_->auditHealthy()) {
      Refusal r{http::status::service_unavailable, "audit_unavailable", "audit_unavailable", "",
                "the audit store has failed; refusing to run unaudited"};
      co_return co_await refuse(r, method, path, false);
    }
    if (!account_->countRequest(limits)) {
      co_return co_await refuse(limitRefusal("workflow limit max_requests (" +
                                             std::to_string(limits.max_requests) + ") reached"),
                                method, path, can_keep);
    }
    policy::Decision d = matcher_->decideRequest(t, method, path);
    if (d.allowed) d = matcher_->decideAddress(d, t, vetted_);
    if (!d.allowed) co_return co_await refuse(denialRefusal(d), method, path, can_keep);
    if (account_->bytesExhausted(limits)) {
      co_return co_await refuse(
          limitRefusal("workflow byte budget (max_bytes_out/max_bytes_in) spent"), method, path,
          can_keep);
    }

    const bool ws = isWebSocketUpgrade(req);
    auto inj = applyInjection(static_cast<http::fields&>(req), d.rule, listener_->secrets.get(),
                              listener_->placeholders);
    if (inj.error) {
      wipeFields(static_cast<http::fields&>(req), inj.touched);
      Refusal r{http::status::bad_gateway, "secret_unavailable", "secret_unavailable", d.rule_id,
                *inj.error};
      co_return co_await refuse(r, method, path, false);
    }
    if (inj.placeholder_leak) {
      log().warn("placeholder for another rule sent on {} https://{}{} (rule {}); not replaced",
                 method, t.authority(), path, d.rule_id);
    }
    const bool expect_continue = beast::iequals(req[http::field::expect], "100-continue");
    stripHopByHop(req);
    req.erase(http::field::expect);
    req.target(query.empty() ? path : path + "?" + query);
    req.set(http::field::host, hostField(t, 443));
    req.keep_alive(true);
    if (ws) {
      req.set(http::field::connection, "Upgrade");
      req.set(http::field::upgrade, "websocket");
    }
    if (expect_continue && body_pending) {
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      beast::get_lowest_layer(client_).expires_after(opt.upstream_timeout);
      co_await net::async_write(client_, net::buffer(kContinue),
                                net::redirect_error(net::use_awaitable, ec));
      if (ec) co_return false;
    }
    auto count_out = [this, &limits](std::size_t n) {
      event_.bytes_up += n;
      return account_->addBytesOut(n, limits);
    };
    auto sent = co_await relay<true>(client_, cbuf_, p, upstream_, count_out);
    wipeFields(static_cast<http::fields&>(req), inj.touched);
    const std::string why = inj.placeholder_leak ? kPlaceholderLeak : reason(Reason::kAllowed);
    if (!sent.ok) {
      if (sent.limit) {
        recordRequest(method, path, 429, false, d.rule_id, reason(Reason::kLimitExceeded),
                      inj.secrets);
        co_await refuse(limitRefusal("workflow limit max_bytes_out reached"), method, path, false);
      } else if (!sent.input_failed) {
        Refusal r{http::status::bad_gateway, "upstream_error", reason(Reason::kUpstreamError),
                  d.rule_id, "upstream " + t.authority() + " failed while receiving the request"};
        co_await refuse(r, method, path, false);
      }
      co_return false;
    }

    // The response: interim 1xx (not 101) are passed on, then the real one.
    const bool is_head = req.method() == http::verb::head;
    std::optional<RespParser> rp;
    for (;;) {
      rp.emplace();
      rp->body_limit(std::numeric_limits<std::uint64_t>::max());
      if (is_head) rp->skip(true);
      beast::get_lowest_layer(upstream_).expires_after(opt.upstream_timeout);
      co_await http::async_read_header(upstream_, ubuf_, *rp,
                                       net::redirect_error(net::use_awaitable, ec));
      if (ec) break;
      int code = rp->get().result_int();
      if (code < 100 || code >= 200 || code == 101) break;
      std::ostringstream interim;
      interim << rp->get().base();
      auto text = interim.str();
      beast::get_lowest_layer(client_).expires_after(opt.upstream_timeout);
      co_await net::async_write(client_, net::buffer(text),
                                net::redirect_error(net::use_awaitable, ec));
      if (ec) co_return false;
    }
    if (ec) {
      bool timed_out = ec == beast::error::timeout;
      Refusal r{timed_out ? http::status::gateway_timeout : http::status::bad_gateway,
                timed_out ? "upstream_timeout" : "upstream_error", reason(Reason::kUpstreamError),
                d.rule_id,
                timed_out
                    ? "upstream " + t.authority() + " did not answer within " +
                          std::to_string(opt.upstream_timeout.count()) + " ms"
                    : "upstream " + t.authority() + " failed before answering: " + ec.message()};
      recordRequest(method, path, static_cast<int>(r.status), true, d.rule_id, r.reason,
                    inj.secrets);
      auto text = renderRefusal(r, workflow().name, false);
      beast::get_lowest_layer(client_).expires_after(opt.upstream_timeout);
      co_await net::async_write(client_, net::buffer(text),
                                net::redirect_error(net::use_awaitable, ec));
      co_return false;
    }
    auto& resp = rp->get();
    const int status = resp.result_int();
    if (status == 101) {
      if (!ws) {
        Refusal r{http::status::bad_gateway, "upstream_error", reason(Reason::kUpstreamError),
                  d.rule_id, "upstream switched protocols without being asked to"};
        co_return co_await refuse(r, method, path, false);
      }
      recordRequest(method, path, 101, true, d.rule_id, why, inj.secrets);
      account_->noteAllowed();
      co_await upgrade(*rp);
      co_return false;
    }
    const bool delimited = rp->chunked() || rp->content_length().has_value() || is_head ||
                           status == 204 || status == 304 || rp->is_done();
    const bool upstream_keep = resp.keep_alive() && delimited;
    client_keep = client_keep && delimited && upstream_keep;
    stripHopByHop(resp);
    if (redactSecrets(static_cast<http::fields&>(resp), inj.secrets, listener_->secrets.get())) {
      log().warn("upstream {} reflected an injected secret in a response header; redacted",
                 t.authority());
    }
    resp.keep_alive(client_keep);
    auto count_in = [this, &limits](std::size_t n) {
      event_.bytes_down += n;
      return account_->addBytesIn(n, limits);
    };
    auto got = co_await relay<false>(upstream_, ubuf_, *rp, client_, count_in);
    recordRequest(method, path, status, true, d.rule_id, why, inj.secrets);
    account_->noteAllowed();
    if (!got.ok) {
      if (got.limit) {
        event_.reason = reason(Reason::kLimitExceeded);
        event_.detail = "workflow limit max_bytes_in reached";
      } else if (got.input_failed) {
        event_.reason = reason(Reason::kUpstreamError);
        event_.detail = "upstream failed mid-response";
      }
      if (!got.header_written) {
        Refusal r = got.limit ? limitRefusal("workflow limit max_bytes_in reached")
                              : Refusal{http::status::bad_gateway, "upstream_error",
                                        reason(Reason::kUpstreamError), d.rule_id,
                                        "upstream " + t.authority() + " failed mid-response"};
        auto text = renderRefusal(r, workflow().name, false);
        beast::get_lowest_layer(client_).expires_after(opt.upstream_timeout);
        co_await net::async_write(client_, net::buffer(text),
                                  net::redirect_error(net::use_awaitable, ec));
      }
      co_return false;
    }
    co_return client_keep;
  }

  // ---- WebSocket: after 101 the tunnel carries frames both ways -------------------------

  net::awaitable<void> upgrade(RespParser& rp) {
    upgraded_ = true;
    ErrorCode ec;
    http::response<http::empty_body> head{rp.get().base()};
    head.set(http::field::connection, "Upgrade");
    head.set(http::field::upgrade, "websocket");
    beast::get_lowest_layer(client_).expires_after(ctx_->options.upstream_timeout);
    co_await http::async_write(client_, head, net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return;
    // Bytes that arrived after the headers on either side go first.
    if (ubuf_.size()) {
      co_await net::async_write(client_, ubuf_.data(), net::redirect_error(net::use_awaitable, ec));
      event_.bytes_down += ubuf_.size();
      ubuf_.consume(ubuf_.size());
    }
    if (cbuf_.size()) {
      co_await net::async_write(upstream_, cbuf_.data(),
                                net::redirect_error(net::use_awaitable, ec));
      event_.bytes_up += cbuf_.size();
      cbuf_.consume(cbuf_.size());
    }
    if (ec) co_return;
    net::co_spawn(client_.get_executor(), pumpUp(shared_from_this()), net::detached);
    co_await pump(upstream_, client_, false);
  }

  static net::awaitable<void> pumpUp(std::shared_ptr<Inspection> self) {
    co_await self->pump(self->client_, self->upstream_, true);
  }

  net::awaitable<void> pump(SslStream& from, SslStream& to, bool up) {
    const auto limits = workflow().limits;
    auto buf = std::make_unique<char[]>(kBufferBytes);
    for (;;) {
      ErrorCode ec;
      beast::get_lowest_layer(from).expires_after(ctx_->options.idle_timeout);
      auto n = co_await from.async_read_some(net::buffer(buf.get(), kBufferBytes),
                                             net::redirect_error(net::use_awaitable, ec));
      if (ec) break;
      beast::get_lowest_layer(to).expires_after(ctx_->options.upstream_timeout);
      co_await net::async_write(to, net::buffer(buf.get(), n),
                                net::redirect_error(net::use_awaitable, ec));
      if (ec) break;
      bool within = up ? account_->addBytesOut(n, limits) : account_->addBytesIn(n, limits);
      (up ? event_.bytes_up : event_.bytes_down) += n;
      if (!within) {
        event_.reason = reason(Reason::kLimitExceeded);
        break;
      }
    }
    closeBoth();  // ends the other pump too
  }

  std::shared_ptr<Context> ctx_;
  std::shared_ptr<Listener> listener_;
  std::shared_ptr<Account> account_;
  std::shared_ptr<const policy::Matcher> matcher_;
  InspectStart start_;
  policy::IpAddress vetted_;
  audit::ConnectionEvent event_;
  SslStream client_;
  SslStream upstream_;
  beast::flat_buffer cbuf_;
  beast::flat_buffer ubuf_;
  SniCheck sni_;
  std::unique_ptr<char[]> relay_buf_;
  Clock::time_point started_;
  std::uint64_t live_id_ = 0;
  bool idle_ = false;
  bool upgraded_ = false;
};

}  // namespace

std::expected<std::shared_ptr<TlsContexts>, std::string> makeTlsContexts(
    const ProxyOptions& options) {
  auto t = std::make_shared<TlsContexts>();
  t->ca = options.ca;
  SSL_CTX* server = t->server.native_handle();
  SSL_CTX_set_min_proto_version(server, TLS1_2_VERSION);
  SSL_CTX_set_options(server, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
  SSL_CTX_set_tlsext_servername_callback(server, onServerName);
  SSL_CTX_set_alpn_select_cb(server, onAlpn, nullptr);

  SSL_CTX* up = t->upstream.native_handle();
  SSL_CTX_set_min_proto_version(up, TLS1_2_VERSION);
  SSL_CTX_set_security_level(up, 2);
  SSL_CTX_set_options(up, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
  SSL_CTX_set_verify(up, SSL_VERIFY_PEER, nullptr);
  if (options.upstream_system_trust && SSL_CTX_set_default_verify_paths(up) != 1) {
    return std::unexpected("cannot load the system trust store: " + sslError());
  }
  for (const auto& f : options.upstream_ca_files) {
    if (SSL_CTX_load_verify_locations(up, f.c_str(), nullptr) != 1) {
      return std::unexpected("cannot load upstream CA file " + f + ": " + sslError());
    }
  }
  // SSL_CTX_set_alpn_protos returns 0 on success (unlike most of OpenSSL).
  if (SSL_CTX_set_alpn_protos(up, kAlpnHttp11, sizeof kAlpnHttp11) != 0) {
    return std::unexpected("cannot set ALPN: " + sslError());
  }
  return t;
}

void startInspection(std::shared_ptr<Context> ctx, std::shared_ptr<Listener> listener,
                     std::shared_ptr<const policy::Matcher> matcher, tcp::socket client,
                     tcp::socket upstream, InspectStart start) {
  start.event.tls = "inspect";
  auto s = std::make_shared<Inspection>(std::move(ctx), std::move(listener), std::move(matcher),
                                        std::move(client), std::move(upstream), std::move(start));
  s->begin();
}

}  // namespace sluice::proxy
