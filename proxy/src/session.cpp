// Client sessions: request reading with deadlines, CONNECT handling, absolute-form HTTP
// forwarding (Beast parsers/serializers with buffer_body so bodies stream), refusals, audit.
#include "session.hpp"

#include <algorithm>
#include <limits>
#include <optional>
#include <sstream>

#include "http_rules.hpp"
#include "injection.hpp"
#include "inspect.hpp"
#include "log.hpp"
#include "tunnel.hpp"

namespace sluice::proxy {

namespace {

using policy::Reason;
using policy::reasonName;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kRelayBufferBytes = 32 * 1024;
constexpr std::size_t kReadChunk = 8 * 1024;

// Parsers whose header fields come from the session's memory pool.
using ReqParser = http::parser<true, http::buffer_body, PmrAllocator>;
using RespParser = http::parser<false, http::buffer_body, PmrAllocator>;

std::string reason(Reason r) { return std::string(reasonName(r)); }

tcp::endpoint toEndpoint(const policy::IpAddress& a, std::uint16_t port) {
  if (a.isV4()) return {net::ip::address_v4(a.v4HostOrder()), port};
  net::ip::address_v6::bytes_type b;
  std::copy(a.bytes().begin(), a.bytes().end(), b.begin());
  return {net::ip::address_v6(b), port};
}

std::string endpointText(const tcp::endpoint& ep) { return ep.address().to_string(); }

bool iequals(beast::string_view a, beast::string_view b) { return beast::iequals(a, b); }

// Result of resolving and vetting a destination.
struct ResolveResult {
  std::vector<policy::IpAddress> addrs;
  std::string error;
};

// Runs the (blocking) resolver on the resolver pool and completes on the caller's executor.
template <typename Token>
auto asyncResolve(std::shared_ptr<Context> ctx, std::string host, Token&& token) {
  return net::async_initiate<Token, void(ResolveResult)>(
      [](auto handler, std::shared_ptr<Context> ctx, std::string host) {
        auto work = net::make_work_guard(net::get_associated_executor(handler));
        net::thread_pool& pool = ctx->resolve_pool->get();
        net::post(pool, [ctx = std::move(ctx), host = std::move(host), handler = std::move(handler),
                         work = std::move(work)]() mutable {
          ResolveResult res;
          auto r = ctx->resolver->resolve(host);
          if (r)
            res.addrs = std::move(*r);
          else
            res.error = r.error();
          auto ex = work.get_executor();
          net::post(ex, [handler = std::move(handler), res = std::move(res)]() mutable {
            handler(std::move(res));
          });
        });
      },
      token, std::move(ctx), std::move(host));
}

// A deadline on one socket's current operation. Setting one only stores a time stamp: the
// timer behind it is armed lazily (only when the new deadline is earlier than the armed one)
// and, when it fires, either cancels the socket's I/O (deadline passed) or re-arms for the
// current deadline. A kept-alive request therefore costs no timer syscalls at all.
struct Watch {
  explicit Watch(const net::any_io_executor& ex) : timer(ex) {}
  net::steady_timer timer;
  Clock::time_point deadline = Clock::time_point::max();  // of the operation in progress
  Clock::time_point armed_at = Clock::time_point::max();  // max = timer not armed
  std::uint64_t arm_gen = 0;
  bool fired = false;
  tcp::socket* socket = nullptr;
};

void armWatch(Watch& w, Clock::time_point at, std::shared_ptr<void> keep) {
  w.armed_at = at;
  auto g = ++w.arm_gen;
  w.timer.expires_at(at);
  w.timer.async_wait([&w, g, keep = std::move(keep)](ErrorCode ec) mutable {
    // Aborted (re-armed earlier, cancelled at session end, or the Watch destroyed): `w` must
    // not be touched.
    if (ec || w.arm_gen != g) return;
    w.armed_at = Clock::time_point::max();
    if (w.deadline == Clock::time_point::max()) return;  // idle: stay unarmed
    if (Clock::now() >= w.deadline) {
      w.fired = true;
      ErrorCode ignored;
      if (w.socket) w.socket->cancel(ignored);
      return;
    }
    armWatch(w, w.deadline, std::move(keep));
  });
}

class Deadline {
 public:
  template <typename Owner>
  Deadline(Watch& w, tcp::socket& s, Clock::time_point at, Owner& owner) : w_(w) {
    w.socket = &s;
    w.deadline = at;
    w.fired = false;
    if (at < w.armed_at) armWatch(w, at, owner.shared_from_this());
  }
  ~Deadline() { w_.deadline = Clock::time_point::max(); }
  bool fired() const { return w_.fired; }

 private:
  Watch& w_;
};

// A body relay buffer, borrowed from a small per-thread pool for the duration of one
// message, so an idle kept-alive client holds none and a busy one does not malloc 32 KiB per
// request. (Returned to whichever thread's pool is current; pools are never shared.)
class RelayBuffer {
 public:
  RelayBuffer() {
    auto& p = pool();
    if (p.empty()) {
      buf_ = std::make_unique<char[]>(kRelayBufferBytes);
    } else {
      buf_ = std::move(p.back());
      p.pop_back();
    }
  }
  ~RelayBuffer() {
    auto& p = pool();
    if (p.size() < kPoolSize) p.push_back(std::move(buf_));
  }
  RelayBuffer(const RelayBuffer&) = delete;
  RelayBuffer& operator=(const RelayBuffer&) = delete;
  char* data() { return buf_.get(); }

 private:
  static constexpr std::size_t kPoolSize = 64;
  static std::vector<std::unique_ptr<char[]>>& pool() {
    thread_local std::vector<std::unique_ptr<char[]>> p;
    return p;
  }
  std::unique_ptr<char[]> buf_;
};

// A kept-alive upstream connection for plain HTTP.
struct Origin {
  explicit Origin(const net::any_io_executor& ex) : socket(ex), watch(ex) {}
  tcp::socket socket;
  Watch watch;
  beast::flat_buffer buf;
  policy::Target target;
  audit::ConnectionEvent event;
  Clock::time_point started;
};

// Releases a connection slot unless handed on.
class Slot {
 public:
  explicit Slot(Account* a) : a_(a) {}
  ~Slot() {
    if (a_) a_->releaseConnection();
  }
  void release() { a_ = nullptr; }

 private:
  Account* a_;
};

enum class ReadStatus { kOk, kClosed, kRefused };

class Session : public std::enable_shared_from_this<Session>, public Closable {
 public:
  Session(std::shared_ptr<Context> ctx, std::shared_ptr<Listener> listener, tcp::socket socket)
      : ctx_(std::move(ctx)),
        listener_(std::move(listener)),
        account_(listener_->account),
        client_(std::move(socket)),
        watch_(client_.get_executor()) {
    ctx_->live.fetch_add(1);
  }

  ~Session() override {
    closeOrigin();  // writes the origin connection's row
    account_->unregisterLive(live_id_);
    ctx_->live.fetch_sub(1);
  }

  void begin() {
    live_id_ = account_->registerLive(weak_from_this());
    ErrorCode ec;
    client_.set_option(tcp::no_delay(true), ec);
    net::co_spawn(client_.get_executor(), run(shared_from_this()), LogEscapedException{"session"});
  }

  void closeIfIdle() override {
    auto self = shared_from_this();
    net::post(client_.get_executor(), [self] {
      if (!self->idle_) return;
      ErrorCode ec;
      self->aborted_ = true;
      self->client_.close(ec);
    });
  }

  void abort() override {
    auto self = shared_from_this();
    net::post(client_.get_executor(), [self] {
      ErrorCode ec;
      self->aborted_ = true;
      self->client_.close(ec);
      if (self->origin_) self->origin_->socket.close(ec);
    });
  }

 private:
  static net::awaitable<void> run(std::shared_ptr<Session> self) {
    co_await self->loop();
    if (!self->handed_off_) {
      ErrorCode ec;
      // Graceful close: send FIN so the client reads the last response before EOF.
      self->client_.shutdown(tcp::socket::shutdown_send, ec);
      if (!ec && !self->aborted_) co_await self->linger();
      self->client_.close(ec);
    }
    // Pending deadline timers hold a reference to the session: release them now.
    self->watch_.timer.cancel();
    if (self->origin_) self->origin_->watch.timer.cancel();
  }

  // Closing a socket with unread input makes the kernel answer with RST, which can destroy a
  // refusal we just sent before the client has read it. Read and discard for a moment first
  // (nginx's lingering close), bounded in time and bytes.
  net::awaitable<void> linger() {
    constexpr std::size_t kMaxDiscard = 256 * 1024;
    const auto deadline = Clock::now() + std::chrono::seconds(1);
    std::size_t discarded = 0;
    buf_.clear();
    while (discarded < kMaxDiscard) {
      ErrorCode ec;
      std::size_t n = 0;
      {
        Deadline d(watch_, client_, deadline, *this);
        n = co_await client_.async_read_some(buf_.prepare(4096),
                                             net::redirect_error(net::use_awaitable, ec));
      }
      if (ec) break;
      discarded += n;
    }
  }

  const policy::Workflow& workflow() const { return matcher_->workflow(); }

  net::awaitable<void> loop() {
    bool first = true;
    for (;;) {
      if (aborted_ || (!first && ctx_->draining.load())) co_return;
      matcher_ = listener_->matcher();
      std::size_t header_len = 0;
      Refusal refusal;
      auto st = co_await readHeader(first, header_len, refusal);
      first = false;
      if (st == ReadStatus::kClosed) co_return;
      if (st == ReadStatus::kRefused) {
        recordMalformed(refusal);
        co_await sendRefusal(refusal, false);
        co_return;
      }
      // Parsers cannot be reset; re-emplacing the member avoids a heap block per request.
      auto* parser = &req_parser_.emplace(std::piecewise_construct, std::make_tuple(),
                                          std::make_tuple(PmrAllocator(&pool_)));
      parser->header_limit(static_cast<std::uint32_t>(ctx_->options.max_header_bytes + 4));
      parser->body_limit(ctx_->options.max_body_bytes);
      ErrorCode ec;
      auto used = parser->put(net::buffer(buf_.data().data(), header_len), ec);
      buf_.consume(ec ? header_len : used);
      if (ec == http::error::body_limit) {
        Refusal r{
            http::status::payload_too_large, "too_large", "body_too_large", "",
            "request body exceeds " + std::to_string(ctx_->options.max_body_bytes) + " bytes"};
        recordMalformed(r);
        co_await sendRefusal(r, false);
        co_return;
      }
      if (ec || !parser->is_header_done()) {
        Refusal r{http::status::bad_request, "bad_request", "invalid_request", "",
                  "malformed request: " + (ec ? ec.message() : std::string("incomplete header"))};
        recordMalformed(r);
        co_await sendRefusal(r, false);
        co_return;
      }
      if (auto r = checkFraming(parser->get())) {
        recordMalformed(*r);
        co_await sendRefusal(*r, false);
        co_return;
      }
      if (parser->get().method() == http::verb::connect) {
        co_await handleConnect(*parser);
        co_return;
      }
      bool keep = co_await handleHttp(*parser);
      if (!keep) co_return;
    }
  }

  // Reads one request header into buf_, enforcing the deadline, the size limit and the raw
  // checks. On kOk, buf_ starts with `header_len` bytes of header.
  net::awaitable<ReadStatus> readHeader(bool first, std::size_t& header_len, Refusal& refusal) {
    const auto& opt = ctx_->options;
    const std::size_t max = opt.max_header_bytes;
    // A fresh connection gets the header deadline; a kept-alive one may wait idle for the
    // next request, then gets the header deadline from its first byte.
    bool waiting_first_byte = !first && buf_.size() == 0;
    if (waiting_first_byte && ctx_->draining.load()) co_return ReadStatus::kClosed;
    auto deadline = Clock::now() + (waiting_first_byte ? opt.idle_timeout : opt.header_timeout);
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
      idle_ = waiting_first_byte && sv.empty();
      if (!sv.empty() && waiting_first_byte) {
        waiting_first_byte = false;
        deadline = Clock::now() + opt.header_timeout;
      }
      auto end = sv.find("\r\n\r\n");
      if (end != std::string_view::npos) {
        header_len = end + 4;
        if (header_len > max + 4) {
          refusal = tooLarge();
          co_return ReadStatus::kRefused;
        }
        if (auto problem = checkHeaderBlock(sv.substr(0, header_len))) {
          refusal =
              Refusal{http::status::bad_request, "bad_request", "invalid_request", "", *problem};
          co_return ReadStatus::kRefused;
        }
        co_return ReadStatus::kOk;
      }
      if (sv.size() > max) {
        refusal = tooLarge();
        co_return ReadStatus::kRefused;
      }
      // A trailing CR may be the first half of a CRLF still in flight.
      auto partial = sv;
      if (!partial.empty() && partial.back() == '\r') partial.remove_suffix(1);
      if (auto problem = checkHeaderBlock(partial)) {
        refusal =
            Refusal{http::status::bad_request, "bad_request", "invalid_request", "", *problem};
        co_return ReadStatus::kRefused;
      }
      ErrorCode ec;
      std::size_t n = 0;
      {
        Deadline d(watch_, client_, deadline, *this);
        n = co_await client_.async_read_some(buf_.prepare(kReadChunk),
                                             net::redirect_error(net::use_awaitable, ec));
        if (ec && d.fired()) ec = net::error::timed_out;
      }
      buf_.commit(n);
      idle_ = false;
      if (ec == net::error::timed_out) {
        if (buf_.size() == 0) co_return ReadStatus::kClosed;  // idle keep-alive: just close
        refusal = Refusal{http::status::request_timeout, "timeout", "header_timeout", "",
                          "request header not complete within " +
                              std::to_string(opt.header_timeout.count()) + " ms"};
        co_return ReadStatus::kRefused;
      }
      if (ec == net::error::eof && buf_.size() > 0) {
        refusal = Refusal{http::status::bad_request, "bad_request", "invalid_request", "",
                          "connection closed in the middle of a request header"};
        co_return ReadStatus::kRefused;
      }
      if (ec) co_return ReadStatus::kClosed;
    }
  }

  Refusal tooLarge() const {
    return Refusal{
        http::status::request_header_fields_too_large, "too_large", "header_too_large", "",
        "request header exceeds " + std::to_string(ctx_->options.max_header_bytes) + " bytes"};
  }

  net::awaitable<bool> writeClient(std::string_view bytes) {
    ErrorCode ec;
    Deadline d(watch_, client_, Clock::now() + ctx_->options.header_timeout, *this);
    co_await net::async_write(client_, net::buffer(bytes.data(), bytes.size()),
                              net::redirect_error(net::use_awaitable, ec));
    co_return !ec;
  }

  net::awaitable<void> sendRefusal(const Refusal& r, bool keep_alive) {
    auto text = renderRefusal(r, workflow().name, keep_alive);
    co_await writeClient(text);
  }

  audit::ConnectionEvent baseEvent(std::string kind) {
    audit::ConnectionEvent ev;
    ev.id = ctx_->newConnectionId(listener_->execution_id);
    ev.execution_id = listener_->execution_id;
    ev.workflow = workflow().name;
    ev.policy_sha256 = workflow().sha256;
    ev.ts_ms = nowMs();
    ev.kind = std::move(kind);
    ev.tls = ev.kind == "connect" ? "passthrough" : "none";
    return ev;
  }

  // A connections row for a refused connection (and the receipt's denial list).
  void recordDeniedConnection(audit::ConnectionEvent ev, const Refusal& r) {
    ev.decision = "deny";
    ev.rule_id = r.rule;
    ev.reason = r.reason;
    ev.detail = r.detail;
    account_->noteDenied(ev.host, ev.port, r.rule, r.reason);
    log().info("deny {} {}:{} rule={} reason={}: {}", ev.kind, ev.host, ev.port,
               r.rule.empty() ? "-" : r.rule, r.reason, r.detail);
    if (ctx_->sink) ctx_->sink->recordConnection(std::move(ev));
  }

  // A request that never reached a parsed target (malformed): one denied connections row.
  void recordMalformed(const Refusal& r) { recordDeniedConnection(baseEvent("http"), r); }

  void recordRequest(const std::string& connection_id, const std::string& method,
                     const std::string& host, const std::string& path, int status, bool allowed,
                     const std::string& rule, const std::string& why,
                     std::vector<std::string> injected = {}) {
    proxy::recordRequest(
        *ctx_, *listener_, workflow().name,
        {connection_id, method, host, path, status, allowed, rule, why, std::move(injected)});
  }

  // A refused plain-HTTP request: a denied connections row, its requests row, the answer.
  net::awaitable<void> refuseRequest(const policy::Target* target, const std::string& method,
                                     const std::string& path, const Refusal& r, bool keep_alive) {
    auto ev = baseEvent("http");
    if (target) {
      ev.host = target->host;
      ev.port = target->port;
    }
    auto id = ev.id;
    recordDeniedConnection(std::move(ev), r);
    recordRequest(id, method, target ? target->host : "", path, static_cast<int>(r.status), false,
                  r.rule, r.reason);
    co_await sendRefusal(r, keep_alive);
  }

  // Resolves (unless an IP literal) and vets every address with the policy's address phase
  // (SSRF guard + rule cidrs) and the loop guard. All addresses must pass: a name that
  // resolves to one public and one private address is refused (rebinding shape).
  net::awaitable<std::expected<std::vector<tcp::endpoint>, Refusal>> vet(
      const policy::Target& target, const policy::Decision& d) {
    std::vector<policy::IpAddress> addrs;
    if (target.ip) {
      addrs.push_back(*target.ip);
    } else {
      auto res = co_await asyncResolve(ctx_, target.host, net::use_awaitable);
      if (!res.error.empty())
        co_return std::unexpected(Refusal{http::status::bad_gateway, "upstream_error",
                                          reason(Reason::kUpstreamError), d.rule_id, res.error});
      addrs = std::move(res.addrs);
    }
    std::vector<tcp::endpoint> eps;
    for (const auto& a : addrs) {
      auto ad = matcher_->decideAddress(d, target, a);
      if (!ad.allowed) {
        auto r = denialRefusal(ad);
        if (r.detail.find(a.str()) == std::string::npos) r.detail += " (address " + a.str() + ")";
        co_return std::unexpected(r);
      }
      auto ep = toEndpoint(a, target.port);
      if (ctx_->isOwnEndpoint(ep))
        co_return std::unexpected(
            Refusal{http::status::forbidden, "denied", reason(Reason::kProxyLoop), d.rule_id,
                    "destination " + target.authority() + " is this proxy's own listener"});
      eps.push_back(ep);
    }
    co_return eps;
  }

  // Dials the vetted endpoints in order on `sock`. 502 on failure, 504 on timeout.
  net::awaitable<std::expected<tcp::endpoint, Refusal>> dial(tcp::socket& sock, Watch& watch,
                                                             const std::vector<tcp::endpoint>& eps,
                                                             const policy::Target& target,
                                                             const std::string& rule) {
    ErrorCode ec;
    bool timed_out = false;
    auto deadline = Clock::now() + ctx_->options.connect_timeout;
    for (const auto& ep : eps) {
      ErrorCode ignored;
      sock.close(ignored);
      {
        Deadline d(watch, sock, deadline, *this);
        co_await sock.async_connect(ep, net::redirect_error(net::use_awaitable, ec));
        if (ec && d.fired()) timed_out = true;
      }
      if (!ec) {
        sock.set_option(tcp::no_delay(true), ignored);
        co_return ep;
      }
      if (timed_out) break;
    }
    if (timed_out)
      co_return std::unexpected(Refusal{
          http::status::gateway_timeout, "upstream_timeout", reason(Reason::kUpstreamError), rule,
          "connecting to " + target.authority() + " timed out after " +
              std::to_string(ctx_->options.connect_timeout.count()) + " ms"});
    co_return std::unexpected(Refusal{http::status::bad_gateway, "upstream_error",
                                      reason(Reason::kUpstreamError), rule,
                                      "cannot connect to " + target.authority() + " (" +
                                          endpointText(eps.back()) + "): " + ec.message()});
  }

  // ---- CONNECT ----------------------------------------------------------------------

  net::awaitable<void> refuseConnect(const audit::ConnectionEvent& ev, const Refusal& r) {
    recordDeniedConnection(ev, r);
    co_await sendRefusal(r, false);
  }

  // Everything about a CONNECT that needs no I/O: Host, body, audit health, policy,
  // inspection, limits. On success a connection slot is taken. (Kept out of the coroutine
  // so no temporaries sit in co_await expressions: g++ 12 can destroy those twice.)
  std::optional<Refusal> connectPrecheck(const ReqParser& parser, const policy::Target& target,
                                         policy::Decision& d) {
    if (auto problem = checkHostAgrees(parser.get(), target, target.port))
      return Refusal{http::status::bad_request, "bad_request", reason(Reason::kHostMismatch), "",
                     *problem};
    if (!parser.is_done())
      return Refusal{http::status::bad_request, "bad_request", "invalid_request", "",
                     "CONNECT request with a body"};
    if (!ctx_->auditHealthy())
      return Refusal{http::status::service_unavailable, "audit_unavailable", "audit_unavailable",
                     "", "the audit store has failed; refusing to run unaudited"};
    d = matcher_->decideConnect(target, policy::Visibility::kTunnel);
    if (!d.allowed) return denialRefusal(d);
    if (d.tls == policy::TlsMode::kInspect && !ctx_->tls) {
      // Tunnelling blindly would skip the rule's method/path/injection conditions.
      return Refusal{http::status::forbidden, "denied", reason(Reason::kInspectionRequired),
                     d.rule_id,
                     "rule " + d.rule_id +
                         " asks for tls: inspect, but this proxy has no CA (sluice proxy "
                         "--ca-dir DIR); refusing rather than tunnelling unseen"};
    }
    const auto& limits = workflow().limits;
    if (account_->bytesExhausted(limits))
      return limitRefusal("workflow byte budget (max_bytes_out/max_bytes_in) spent");
    if (!account_->acquireConnection(limits))
      return limitRefusal("workflow limit max_connections (" +
                          std::to_string(limits.max_connections) + " concurrent) reached");
    return std::nullopt;
  }

  net::awaitable<void> handleConnect(ReqParser& parser) {
    auto& req = parser.get();
    auto ev = baseEvent("connect");
    std::string raw_target(req.target());
    auto target = policy::parseAuthority(raw_target);
    if (!target) {
      ev.host = raw_target.substr(0, 255);
      Refusal r{http::status::bad_request, "bad_request", reason(Reason::kInvalidTarget), "",
                "CONNECT target '" + ev.host + "' does not parse: " + target.error()};
      co_await refuseConnect(ev, r);
      co_return;
    }
    ev.host = target->host;
    ev.port = target->port;
    policy::Decision d;
    std::optional<Refusal> pre = connectPrecheck(parser, *target, d);
    if (pre) {
      co_await refuseConnect(ev, *pre);
      co_return;
    }
    const auto limits = workflow().limits;
    Slot slot(account_.get());
    auto eps = co_await vet(*target, d);
    if (!eps) {
      const Refusal& r = eps.error();
      co_await refuseConnect(ev, r);
      co_return;
    }
    tcp::socket upstream(client_.get_executor());
    Watch upstream_watch(client_.get_executor());
    auto ep = co_await dial(upstream, upstream_watch, *eps, *target, d.rule_id);
    if (!ep) {
      ev.resolved_ip = endpointText(eps->front());
      const Refusal& r = ep.error();
      co_await refuseConnect(ev, r);
      co_return;
    }
    ev.resolved_ip = endpointText(*ep);
    ev.decision = "allow";
    ev.rule_id = d.rule_id;
    ev.reason = reason(Reason::kAllowed);
    ev.tls = "passthrough";
    if (d.tls == policy::TlsMode::kInspect) {
      // The inspector answers the CONNECT itself (502 if the upstream's certificate fails).
      InspectStart start{*target, d, *ep, ev,
                         std::string(static_cast<const char*>(buf_.data().data()), buf_.size())};
      buf_ = beast::flat_buffer();
      slot.release();
      handed_off_ = true;
      startInspection(ctx_, listener_, matcher_, std::move(client_), std::move(upstream),
                      std::move(start));
      co_return;
    }
    static constexpr std::string_view kEstablished = "HTTP/1.1 200 Connection established\r\n\r\n";
    if (!co_await writeClient(kEstablished)) co_return;  // slot released, nothing dialled used
    account_->noteAllowed();
    account_->noteUpstreamConnection();
    log().debug("allow connect {} -> {} rule={}", target->authority(), ev.resolved_ip, d.rule_id);
    std::string early(static_cast<const char*>(buf_.data().data()), buf_.size());
    buf_ = beast::flat_buffer();
    slot.release();
    handed_off_ = true;
    startTunnel(ctx_, account_, limits, std::move(client_), std::move(upstream), std::move(early),
                std::move(ev));
  }

  // ---- absolute-form HTTP --------------------------------------------------------------

  void closeOrigin() {
    if (!origin_) return;
    ErrorCode ec;
    origin_->socket.close(ec);
    auto& ev = origin_->event;
    ev.duration_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - origin_->started)
            .count();
    if (ctx_->sink) ctx_->sink->recordConnection(std::move(ev));
    account_->releaseConnection();
    origin_.reset();
  }

  enum class RelayFail { kNone, kInput, kOutput, kLimit };
  struct RelayResult {
    RelayFail fail = RelayFail::kNone;
    bool header_written = false;
    bool timed_out = false;
    ErrorCode ec;
  };

  // Streams one message: header (already parsed into `p`) then body, from `in` to `out`.
  // `count` is told every byte written to `out` and returns false to stop (limit). When body
  // bytes are already buffered, header and first body bytes leave in one write.
  template <bool isRequest, typename Count>
  net::awaitable<RelayResult> relay(tcp::socket& in, Watch& in_watch, beast::flat_buffer& in_buf,
                                    http::parser<isRequest, http::buffer_body, PmrAllocator>& p,
                                    tcp::socket& out, Watch& out_watch, Count count) {
    RelayResult res;
    const auto timeout = ctx_->options.upstream_timeout;
    http::serializer<isRequest, http::buffer_body, PmrFields> sr{p.get()};
    RelayBuffer relay_buf;
    char* buf = relay_buf.data();
    if (!p.is_done() && in_buf.size() == 0) {
      // Nothing of the body is here yet: send the header now so the peer is not kept
      // waiting for it (streaming responses, slow uploads).
      Deadline d(out_watch, out, Clock::now() + timeout, *this);
      auto n = co_await http::async_write_header(out, sr,
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
        offerBodyBuffer(p, buf, kRelayBufferBytes);
        ErrorCode ec;
        {
          Deadline d(in_watch, in, Clock::now() + timeout, *this);
          co_await http::async_read_some(in, in_buf, p,
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
      } else {
        endBody(p);
      }
      ErrorCode ec;
      std::size_t n = 0;
      {
        Deadline d(out_watch, out, Clock::now() + timeout, *this);
        n = co_await http::async_write(out, sr, net::redirect_error(net::use_awaitable, ec));
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

  // Opens (or reuses) the origin connection for `target`. Returns a refusal on failure.
  net::awaitable<std::optional<Refusal>> ensureOrigin(const policy::Target& target,
                                                      const policy::Decision& d) {
    if (origin_ && (origin_->target.host != target.host || origin_->target.port != target.port))
      closeOrigin();
    if (origin_) co_return std::nullopt;
    const auto& limits = workflow().limits;
    if (!account_->acquireConnection(limits))
      co_return limitRefusal("workflow limit max_connections (" +
                             std::to_string(limits.max_connections) + " concurrent) reached");
    Slot slot(account_.get());
    auto eps = co_await vet(target, d);
    if (!eps) co_return eps.error();
    auto o = std::make_unique<Origin>(client_.get_executor());
    auto ep = co_await dial(o->socket, o->watch, *eps, target, d.rule_id);
    if (!ep) co_return ep.error();
    o->target = target;
    o->started = Clock::now();
    o->event = baseEvent("http");
    o->event.host = target.host;
    o->event.port = target.port;
    o->event.resolved_ip = endpointText(*ep);
    o->event.decision = "allow";
    o->event.rule_id = d.rule_id;
    o->event.reason = reason(Reason::kAllowed);
    account_->noteUpstreamConnection();
    slot.release();
    origin_ = std::move(o);
    co_return std::nullopt;
  }

  // The checks of a plain-HTTP request that need no I/O: target, scheme, Host, audit health,
  // max_requests, policy, byte budget. Returns the refusal, if any; `keep` says whether the
  // client connection may stay open after it. (Synchronous on purpose: see connectPrecheck.)
  std::optional<Refusal> httpPrecheck(const ReqParser& parser,
                                      const std::expected<policy::ParsedUrl, std::string>& url,
                                      const std::string& raw_target, const std::string& method,
                                      policy::Decision& d, bool& keep) {
    keep = false;
    if (!url) {
      std::string why = !raw_target.empty() && raw_target.front() == '/'
                            ? "request target is origin-form; a proxy needs absolute-form "
                              "(http://host/path)"
                            : "request target does not parse: " + url.error();
      return Refusal{http::status::bad_request, "bad_request", reason(Reason::kInvalidTarget), "",
                     why};
    }
    const auto& target = url->target;
    if (url->scheme != "http")
      return Refusal{http::status::bad_request, "bad_request", reason(Reason::kInvalidTarget), "",
                     "https:// URLs must be tunnelled with CONNECT"};
    if (auto problem = checkHostAgrees(parser.get(), target, 80))
      return Refusal{http::status::bad_request, "bad_request", reason(Reason::kHostMismatch), "",
                     *problem};
    if (!ctx_->auditHealthy())
      return Refusal{http::status::service_unavailable, "audit_unavailable", "audit_unavailable",
                     "", "the audit store has failed; refusing to run unaudited"};
    // From here on the request itself is well-formed: a refusal can keep the connection
    // when no request body is left unread.
    keep = parser.get().keep_alive() && !ctx_->draining.load() && parser.is_done();
    const auto& limits = workflow().limits;
    if (!account_->countRequest(limits))
      return limitRefusal("workflow limit max_requests (" + std::to_string(limits.max_requests) +
                          ") reached");
    d = matcher_->decideRequest(target, method, url->path);
    policy::refusePlaintextInjection(d);
    if (!d.allowed) return denialRefusal(d);
    if (account_->bytesExhausted(limits))
      return limitRefusal("workflow byte budget (max_bytes_out/max_bytes_in) spent");
    return std::nullopt;
  }

  // Forwards one absolute-form request. Returns whether the client connection stays open.
  net::awaitable<bool> handleHttp(ReqParser& parser) {
    auto& req = parser.get();
    const std::string method(req.method_string());
    const bool body_pending = !parser.is_done();
    std::string raw_target(req.target());
    auto url = policy::parseUrl(raw_target);
    policy::Decision d;
    bool client_keep = false;
    std::optional<Refusal> pre = httpPrecheck(parser, url, raw_target, method, d, client_keep);
    if (pre) {
      const policy::Target* tp = url ? &url->target : nullptr;
      std::string path = url ? url->path : raw_target.substr(0, 255);
      co_await refuseRequest(tp, method, path, *pre, client_keep);
      co_return client_keep;
    }
    const auto& target = url->target;
    const std::string& path = url->path;
    const auto limits = workflow().limits;
    client_keep = req.keep_alive() && !ctx_->draining.load();

    // Rewrite the request for the origin: origin-form target (exactly the path and query
    // the policy judged), our Host, no hop-by-hop fields.
    const bool expect_continue = iequals(req[http::field::expect], "100-continue");
    auto inj = applyInjection(static_cast<PmrFields&>(req), d.rule, listener_->secrets.get(),
                              listener_->placeholders);
    if (inj.error) {
      wipeFields(static_cast<PmrFields&>(req), inj.touched);
      Refusal r{http::status::bad_gateway, "secret_unavailable", "secret_unavailable", d.rule_id,
                *inj.error};
      co_await refuseRequest(&target, method, path, r, false);
      co_return false;
    }
    if (inj.placeholder_leak)
      log().warn("placeholder for another rule sent on {} {}{} (rule {}); not replaced", method,
                 target.authority(), path, d.rule_id);
    const std::string allowed_why =
        inj.placeholder_leak ? std::string(kPlaceholderLeak) : reason(Reason::kAllowed);
    stripHopByHop(req);
    req.erase(http::field::expect);
    req.target(url->query.empty() ? path : path + "?" + url->query);
    req.set(http::field::host, hostField(target, 80));
    req.keep_alive(true);
    if (expect_continue && body_pending) {
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      if (!co_await writeClient(kContinue)) co_return false;
    }
    const bool is_head = req.method() == http::verb::head;

    for (int attempt = 0;; ++attempt) {
      bool reused = origin_ != nullptr;
      std::optional<Refusal> dial_refusal;
      const bool reusable =
          origin_ && origin_->target.host == target.host && origin_->target.port == target.port;
      if (!reusable) dial_refusal = co_await ensureOrigin(target, d);
      if (auto& r = dial_refusal) {
        auto ev = baseEvent("http");
        ev.host = target.host;
        ev.port = target.port;
        auto id = ev.id;
        recordDeniedConnection(std::move(ev), *r);
        recordRequest(id, method, target.host, path, static_cast<int>(r->status), false, r->rule,
                      r->reason);
        co_await sendRefusal(*r, client_keep && !body_pending);
        co_return client_keep && !body_pending;
      }
      auto& o = *origin_;
      const std::string conn_id = o.event.id;
      auto count_out = [this, &o, &limits](std::size_t n) {
        o.event.bytes_up += n;
        return account_->addBytesOut(n, limits);
      };
      auto sent = co_await relay<true>(client_, watch_, buf_, parser, o.socket, o.watch, count_out);
      wipeFields(static_cast<PmrFields&>(req), inj.touched);
      if (sent.fail == RelayFail::kInput) {  // client went away or stalled mid-body
        closeOrigin();
        co_return false;
      }
      if (sent.fail == RelayFail::kLimit) {
        o.event.reason = reason(Reason::kLimitExceeded);
        o.event.detail = "workflow limit max_bytes_out reached";
        recordRequest(conn_id, method, target.host, path, 429, false, d.rule_id,
                      reason(Reason::kLimitExceeded));
        closeOrigin();
        Refusal r = limitRefusal("workflow limit max_bytes_out reached");
        co_await sendRefusal(r, false);
        co_return false;
      }
      ErrorCode ec;
      bool timed_out = sent.timed_out;
      std::optional<RespParser> rp;
      if (sent.fail == RelayFail::kNone) {
        // Interim 1xx responses (other than 101) are passed on; then the real one.
        for (;;) {
          rp.emplace(std::piecewise_construct, std::make_tuple(),
                     std::make_tuple(PmrAllocator(&pool_)));
          rp->body_limit(std::numeric_limits<std::uint64_t>::max());
          if (is_head) rp->skip(true);
          {
            Deadline dl(o.watch, o.socket, Clock::now() + ctx_->options.upstream_timeout, *this);
            co_await http::async_read_header(o.socket, o.buf, *rp,
                                             net::redirect_error(net::use_awaitable, ec));
            if (ec && dl.fired()) timed_out = true;
          }
          if (ec) break;
          auto code = rp->get().result_int();
          if (code < 100 || code >= 200 || code == 101) break;
          std::ostringstream interim_stream;
          interim_stream << rp->get().base();
          std::string interim = interim_stream.str();
          if (!co_await writeClient(interim)) {
            closeOrigin();
            co_return false;
          }
        }
      } else {
        ec = sent.ec;
      }
      if (sent.fail != RelayFail::kNone || ec) {
        // A reused keep-alive connection the origin had already closed: retry once on a
        // fresh one when the request had no body (safe to resend).
        bool stale = reused && attempt == 0 && !body_pending && !timed_out &&
                     (!rp || rp->got_some() == false);
        closeOrigin();
        if (stale) continue;
        Refusal r =
            timed_out ? Refusal{http::status::gateway_timeout, "upstream_timeout",
                                reason(Reason::kUpstreamError), d.rule_id,
                                "upstream " + target.authority() + " did not answer within " +
                                    std::to_string(ctx_->options.upstream_timeout.count()) + " ms"}
                      : Refusal{http::status::bad_gateway, "upstream_error",
                                reason(Reason::kUpstreamError), d.rule_id,
                                "upstream " + target.authority() +
                                    " failed before answering: " + ec.message()};
        recordRequest(conn_id, method, target.host, path, static_cast<int>(r.status), true,
                      d.rule_id, r.reason);
        account_->noteDenied(target.host, target.port, r.rule, r.reason);
        co_await sendRefusal(r, false);
        co_return false;
      }
      auto& resp = rp->get();
      const int status = resp.result_int();
      if (status == 101) {
        closeOrigin();
        Refusal r{http::status::bad_gateway, "upstream_error", reason(Reason::kUpstreamError),
                  d.rule_id, "upstream switched protocols, which this proxy does not relay"};
        recordRequest(conn_id, method, target.host, path, 502, true, d.rule_id, r.reason);
        co_await sendRefusal(r, false);
        co_return false;
      }
      const bool delimited = rp->chunked() || rp->content_length().has_value() || is_head ||
                             status == 204 || status == 304 || rp->is_done();
      const bool upstream_keep = resp.keep_alive() && delimited;
      client_keep = client_keep && delimited;
      stripHopByHop(resp);
      if (redactSecrets(static_cast<PmrFields&>(resp), inj.secrets, listener_->secrets.get()))
        log().warn("upstream {} reflected an injected secret in a response header; redacted",
                   target.authority());
      resp.keep_alive(client_keep);
      auto count_in = [this, &o, &limits](std::size_t n) {
        o.event.bytes_down += n;
        return account_->addBytesIn(n, limits);
      };
      auto got = co_await relay<false>(o.socket, o.watch, o.buf, *rp, client_, watch_, count_in);
      if (got.fail == RelayFail::kLimit) {
        o.event.reason = reason(Reason::kLimitExceeded);
        o.event.detail = "workflow limit max_bytes_in reached";
      } else if (got.fail == RelayFail::kInput) {
        o.event.reason = reason(Reason::kUpstreamError);
        o.event.detail = "upstream failed mid-response: " + got.ec.message();
      }
      recordRequest(conn_id, method, target.host, path, status, true, d.rule_id, allowed_why,
                    inj.secrets);
      account_->noteAllowed();
      if (got.fail != RelayFail::kNone) {
        if (!got.header_written) {
          // Nothing reached the client yet: it can still get an answer.
          auto why = got.fail == RelayFail::kLimit ? "workflow limit max_bytes_in reached"
                                                   : "upstream failed: " + got.ec.message();
          closeOrigin();
          Refusal r = got.fail == RelayFail::kLimit
                          ? limitRefusal(why)
                          : Refusal{http::status::bad_gateway, "upstream_error",
                                    reason(Reason::kUpstreamError), d.rule_id, why};
          co_await sendRefusal(r, false);
          co_return false;
        }
        closeOrigin();
        // Headers already went out: the only honest signal left is closing the connection.
        ErrorCode ignored;
        client_.close(ignored);
        co_return false;
      }
      if (!upstream_keep) closeOrigin();
      co_return client_keep;
    }
  }

  std::shared_ptr<Context> ctx_;
  std::shared_ptr<Listener> listener_;
  std::shared_ptr<Account> account_;
  std::shared_ptr<const policy::Matcher> matcher_;
  tcp::socket client_;
  Watch watch_;
  beast::flat_buffer buf_;
  std::unique_ptr<Origin> origin_;
  // Header fields of this connection's messages are allocated here. Only this session's
  // strand touches it, so the unsynchronised pool is safe; declared before the parser so it
  // outlives it.
  std::pmr::unsynchronized_pool_resource pool_;
  std::optional<ReqParser> req_parser_;
  std::uint64_t live_id_ = 0;
  bool handed_off_ = false;
  bool aborted_ = false;
  bool idle_ = false;  // waiting for the first byte of a kept-alive connection's next request
};

}  // namespace

void startSession(std::shared_ptr<Context> ctx, std::shared_ptr<Listener> listener,
                  tcp::socket socket) {
  auto s = std::make_shared<Session>(std::move(ctx), std::move(listener), std::move(socket));
  s->begin();
}

}  // namespace sluice::proxy
