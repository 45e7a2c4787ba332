// Client connections: the request loop of one accepted connection (each request goes through
// the one exchange pipeline), CONNECT handling, and what a tunnel turns out to carry. (The word
// "session" belongs to `sluice serve`.)
#include "client_connection.hpp"

#include "admission.hpp"
#include "approval_wait.hpp"
#include "audit_rows.hpp"
#include "exchange.hpp"
#include "http_rules.hpp"
#include "inspect.hpp"
#include "log.hpp"
#include "origin_link.hpp"
#include "parked_upstreams.hpp"
#include "policy_cut.hpp"
#include "sniff.hpp"
#include "transparent.hpp"
#include "tunnel.hpp"

namespace sluice::proxy {

namespace {

using policy::Reason;

// How long a redirected connection's client gets to speak first (TLS, HTTP) before it is taken
// for a server-first protocol (ssh) and decided by its address alone.
constexpr auto kTransparentPeek = std::chrono::milliseconds(300);

// The upstream of a CONNECT tunnel that turned out to carry plain HTTP.
struct TunnelUpstream {
  TunnelUpstream(tcp::socket s, policy::Target t, policy::IpAddress a, audit::ConnectionEvent ev)
      : socket(std::move(s)),
        watch(socket.get_executor()),
        target(std::move(t)),
        row(std::move(ev)),
        link(socket, watch, buf, target, a, row),
        started(Clock::now()) {}
  tcp::socket socket;
  Watch watch;
  beast::flat_buffer buf;
  policy::Target target;
  audit::ConnectionEvent row;
  FixedLink<tcp::socket> link;
  Clock::time_point started;
};

// Where a tunnel goes out: a new connection, dialled on a socket of its own; or, for a tunnel
// its decision inspects, a verified TLS connection an earlier tunnel of the same account parked
// (parked_upstreams.hpp), to an address this tunnel's admission has just vetted.
struct TunnelDial final : Outlet {
  TunnelDial(ConnState& c, const net::any_io_executor& ex, std::shared_ptr<void> k)
      : conn(c), socket(ex), watch(ex), keep(std::move(k)) {}
  const policy::IpAddress* openTo(const policy::Target&) override { return nullptr; }
  std::optional<Refusal> cannotDial(const std::string&) const override { return std::nullopt; }
  void decided(const policy::Decision& d) override { inspect = d.tls == policy::TlsMode::kInspect; }
  net::awaitable<std::expected<VettedAddress, Refusal>> dial(
      const std::vector<VettedAddress>& addrs, const policy::Target& target,
      const std::string& rule_id) override {
    // A refused dial's row names the first address tried.
    tried = addrs.front().endpoint.address().to_string();
    if (inspect && conn.ctx->parked) {
      pooled = conn.ctx->parked->take(conn.account(), target, addrs);
      if (pooled) {
        dialled = pooled->vetted;
        co_return dialled;
      }
    }
    auto r = co_await dialVetted(conn.ctx, socket, watch, addrs, target, rule_id, keep);
    watch.timer.cancel();
    if (r) dialled = *r;
    co_return r;
  }
  ConnState& conn;
  tcp::socket socket;
  Watch watch;
  std::shared_ptr<void> keep;
  std::string tried;
  VettedAddress dialled;
  bool inspect = false;
  std::optional<ParkedUpstreams::Taken> pooled;  // instead of `socket`
};

// The account a client connection is charged to (per client on a standalone listener).
std::shared_ptr<Account> chargedTo(Listener& listener, const tcp::socket& client) {
  ErrorCode ec;
  auto peer = client.remote_endpoint(ec);
  return listener.accountFor(peer);
}

class ClientConnection : public std::enable_shared_from_this<ClientConnection>, public Closable {
 public:
  ClientConnection(std::shared_ptr<Context> ctx, std::shared_ptr<Listener> listener,
                   tcp::socket socket)
      : client_(std::move(socket)),
        watch_(client_.get_executor()),
        conn_{ctx,   listener, listener->matcher(), chargedTo(*listener, client_), {}, {},
              false, false},
        origin_(ctx, listener, conn_.budget, client_.get_executor(),
                [this] { return shared_from_this(); }),
        exchange_(conn_, client_, watch_, buf_) {
    conn_.keep_alive = [this] { return std::shared_ptr<void>(shared_from_this()); };
    exchange_.carry(Carrier::kPlainHttp, &origin_, nullptr);
    origin_.policyFrom([this] { return PolicySnapshot{conn_.matcher, conn_.generation}; });
    ctx->live.fetch_add(1);
  }

  ~ClientConnection() override {
    endTunnelUpstream();
    origin_.close();  // writes the origin connection's row
    conn_.account().unregisterLive(live_id_);
    conn_.ctx->live.fetch_sub(1);
  }

  void begin() {
    live_id_ = conn_.account().registerLive(weak_from_this());
    ErrorCode ec;
    client_.set_option(tcp::no_delay(true), ec);
    net::co_spawn(client_.get_executor(), run(shared_from_this()),
                  LogEscapedException{"client connection"});
  }

  void closeIfIdle() override {
    auto self = shared_from_this();
    net::post(client_.get_executor(), [self] {
      if (!self->conn_.idle) return;
      ErrorCode ec;
      self->conn_.aborted = true;
      self->client_.close(ec);
    });
  }

  // A plain-HTTP tunnel the new policy refuses is closed; kept-alive plain HTTP needs nothing
  // (each request is decided by the policy in force), a passthrough tunnel is a Tunnel's.
  void redecide(const PolicySnapshot& p) override {
    auto self = shared_from_this();
    net::post(client_.get_executor(), [self, p] {
      if (!self->tunnel_up_ || self->conn_.aborted) return;
      auto why = tunnelRefusedBy(p, self->tunnel_up_->row);
      if (!why) return;
      markCut(self->tunnel_up_->row, p, std::move(*why));
      log().info("tunnel {} cut: {}", self->tunnel_up_->row.id, self->tunnel_up_->row.detail);
      ErrorCode ec;
      self->conn_.aborted = true;
      withdrawApproval(self->conn_);
      self->client_.close(ec);
      self->tunnel_up_->socket.close(ec);
    });
  }

  void abort() override {
    auto self = shared_from_this();
    net::post(client_.get_executor(), [self] {
      ErrorCode ec;
      self->conn_.aborted = true;
      withdrawApproval(self->conn_);
      self->client_.close(ec);
      self->origin_.abort();
      if (self->tunnel_up_) self->tunnel_up_->socket.close(ec);
    });
  }

 private:
  static net::awaitable<void> run(std::shared_ptr<ClientConnection> self) {
    co_await self->loop();
    if (!self->handed_off_) {
      ErrorCode ec;
      // Graceful close: send FIN so the client reads the last response before EOF (not for an
      // aborted connection: a refused redirected one must see its reset, not a FIN).
      if (!self->conn_.aborted) self->client_.shutdown(tcp::socket::shutdown_send, ec);
      if (!ec && !self->conn_.aborted) co_await self->linger();
      self->client_.close(ec);
    }
    // Pending deadline timers hold a reference to the connection: release them now.
    self->watch_.timer.cancel();
    self->origin_.abort();
    if (self->tunnel_up_) self->tunnel_up_->watch.timer.cancel();
  }

  net::awaitable<void> loop() {
    bool first = true;
    // The policy in force, for a redirected connection's decision (the exchange takes it again
    // as each request arrives); a tunnel a live update refuses is closed at the swap.
    conn_.adopt(conn_.listener->policy());
    // A connection the sandbox's nftables rule redirected here: decided as CONNECT to its
    // original destination (transparent.hpp), then relayed or served like a tunnel. Only a
    // sandbox's listeners (they carry its DNS names) are redirected to: a shared proxy reached
    // through DNAT (a published container port, a Kubernetes Service) would otherwise take each
    // proxy client for a redirected connection, and it saves two syscalls per connection.
    if (conn_.listener->names) {
      if (auto dst = originalDestination(client_)) {
        if (!co_await handleTransparent(*dst)) co_return;
      }
    }
    for (;;) {
      auto next = co_await exchange_.next(first);
      first = false;
      if (next == Exchange<tcp::socket, tcp::socket>::Next::kContinue) continue;
      if (next == Exchange<tcp::socket, tcp::socket>::Next::kClose) co_return;
      if (!co_await handleConnect()) co_return;
      first = true;  // the tunnel carries plain HTTP: its first request gets the header deadline
    }
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
        Deadline d(watch_, client_, deadline, conn_.keep_alive);
        n = co_await client_.async_read_some(buf_.prepare(4096),
                                             net::redirect_error(net::use_awaitable, ec));
      }
      if (ec) break;
      discarded += n;
    }
  }

  net::awaitable<bool> writeClient(std::string_view bytes) {
    ErrorCode ec;
    Deadline d(watch_, client_, Clock::now() + conn_.ctx->options.header_timeout, conn_.keep_alive);
    co_await net::async_write(client_, net::buffer(bytes.data(), bytes.size()),
                              net::redirect_error(net::use_awaitable, ec));
    co_return !ec;
  }

  net::awaitable<void> refuseConnect(const audit::ConnectionEvent& ev, const Refusal& r) {
    recordDeniedConnection(*conn_.ctx, conn_.account(), ev, r);
    if (transparent_) {
      // The program spoke no HTTP to us: it gets a reset (SO_LINGER 0 makes the close send
      // RST), the row says why (docs/proxy.md).
      ErrorCode ec;
      client_.set_option(net::socket_base::linger(true, 0), ec);
      conn_.aborted = true;
      co_return;
    }
    std::string text = renderRefusal(r, conn_.workflow().name, false);
    co_await writeClient(text);
  }

  // A redirected connection: the name from the DNS map, else the first bytes (SNI, Host; a
  // client that speaks first), else the address itself; then as a CONNECT that needs no answer.
  net::awaitable<bool> handleTransparent(tcp::endpoint dst) {
    transparent_ = true;
    auto ev = connectionRow(*conn_.ctx, *conn_.listener, conn_.workflow(),
                            audit::ConnectionKind::kTransparent, conn_.generation);
    const SyntheticNames* names = conn_.listener->names.get();
    NameInOpening seen;
    if (!names || !names->nameOf(toIpAddress(dst))) {
      // Server-first protocols (ssh, smtp) send nothing until the server does: wait briefly.
      const auto opening = co_await peek(Clock::now() + kTransparentPeek);
      if (opening == Opening::kTls) seen = co_await completeOpening(sniOf);
      if (opening == Opening::kHttp) seen = co_await completeOpening(httpHostOf);
    }
    auto target = policy::makeTarget(transparentHost(dst, names, seen), dst.port());
    if (!target) {
      ev.host = dst.address().to_string();
      ev.port = dst.port();
      Refusal r = refusal(Reason::kInvalidTarget,
                          "redirected connection to " + ev.host +
                              ": the name it names does not parse: " + target.error());
      co_await refuseConnect(ev, r);  // a raw client gets a reset, no HTTP refusal
      co_return false;
    }
    co_return co_await openTunnel(*target, std::move(ev), true);
  }

  // Reads until `parse` finds the name or gives up (bounded by the header deadline).
  template <typename Parse>
  net::awaitable<NameInOpening> completeOpening(Parse parse) {
    const auto deadline = Clock::now() + conn_.ctx->options.header_timeout;
    for (;;) {
      const std::string_view b(static_cast<const char*>(buf_.data().data()), buf_.size());
      auto found = parse(b);
      if (found.status != Peeked::kMore || buf_.size() > 65536) co_return found;
      if (!co_await readMore(deadline, 4096)) co_return NameInOpening{Peeked::kAbsent, ""};
    }
  }

  // Appends what the client sends next (up to `max` bytes) to buf_; false on EOF, error or
  // the deadline.
  net::awaitable<bool> readMore(Clock::time_point deadline, std::size_t max) {
    ErrorCode ec;
    std::size_t n = 0;
    {
      Deadline d(watch_, client_, deadline, conn_.keep_alive);
      n = co_await client_.async_read_some(buf_.prepare(max),
                                           net::redirect_error(net::use_awaitable, ec));
    }
    buf_.commit(n);
    co_return !ec;
  }

  // Decides, vets and dials a CONNECT, answers it, then finds out what the tunnel carries.
  // Returns true when the connection goes on serving plain HTTP inside the tunnel.
  net::awaitable<bool> handleConnect() {
    auto ev = connectionRow(*conn_.ctx, *conn_.listener, conn_.workflow(),
                            audit::ConnectionKind::kConnect, conn_.generation);
    std::string raw_target(exchange_.parser().get().target());
    auto target = policy::parseAuthority(raw_target);
    if (!target) {
      ev.host = raw_target.substr(0, 255);
      Refusal r = refusal(Reason::kInvalidTarget,
                          "CONNECT target '" + ev.host + "' does not parse: " + target.error());
      co_await refuseConnect(ev, r);
      co_return false;
    }
    if (auto r = connectSyntax(*target)) {
      ev.host = target->host;
      ev.port = target->port;
      co_await refuseConnect(ev, *r);
      co_return false;
    }
    co_return co_await openTunnel(*target, std::move(ev), false);
  }

  // What the CONNECT request itself must get right: a Host naming its target, no body.
  std::optional<Refusal> connectSyntax(const policy::Target& target) {
    const auto& parser = exchange_.parser();
    if (auto problem = checkHostAgrees(parser.get(), target, target.port))
      return refusal(Reason::kHostMismatch, *problem);
    if (!parser.is_done()) return refusal(Reason::kInvalidRequest, "CONNECT request with a body");
    return std::nullopt;
  }

  // The tunnel to `target` (a CONNECT, or a redirected connection when `transparent`: no
  // "200 Connection established", refusals are a reset).
  net::awaitable<bool> openTunnel(policy::Target target_value, audit::ConnectionEvent ev,
                                  bool transparent) {
    const policy::Target* target = &target_value;
    ev.host = target->host;
    ev.port = target->port;
    TunnelDial up(conn_, client_.get_executor(), shared_from_this());
    const Candidate tunnel{*target};
    auto admitted = co_await admit(conn_, client_, tunnel, up);
    // A live update while an approval waited re-decided it: the row is that generation's.
    ev.stamp.policy_generation = conn_.generation;
    if (!admitted) {
      if (!up.tried.empty()) ev.resolved_ip = up.tried;
      co_await refuseConnect(ev, admitted.error());
      co_return false;
    }
    Slot slot(&conn_.account());  // taken by the admission; handed on below or released
    http_only_refusal_ = std::move(admitted->http_only);
    // The row names the approval (and, when a remembered answer decided, that grant), as the
    // approvals row of that id does.
    if (!admitted->approval.empty()) ev.detail = admitted->approval;
    tcp::socket upstream = std::move(up.socket);
    auto pooled = std::move(up.pooled);
    const policy::Decision& d = admitted->decision;
    allowConnection(ev, up.dialled.endpoint, d);
    static constexpr std::string_view kEstablished = "HTTP/1.1 200 Connection established\r\n\r\n";
    if (!transparent && !co_await writeClient(kEstablished)) {
      if (pooled) parkAgain(*target, std::move(*pooled));
      co_return false;  // slot released
    }
    log().debug("allow connect {} -> {} rule={}", target->authority(), ev.resolved_ip, d.rule_id);
    co_return co_await carry(*target, d, up.dialled, std::move(upstream), std::move(ev), slot,
                             std::move(pooled));
  }

  // A parked connection a tunnel took but cannot use goes back for the next one.
  void parkAgain(const policy::Target& target, ParkedUpstreams::Taken t) {
    conn_.ctx->parked->park(conn_.budget, target, t.vetted.endpoint, std::move(t.stream),
                            std::move(t.opened_by));
  }

  // What an established tunnel turns out to carry: relayed as it is when no rule judges its
  // requests, else inspected TLS, relayed TLS or plain HTTP through the pipeline (true: the
  // connection goes on serving that HTTP), or refused. `slot` is handed on or released.
  net::awaitable<bool> carry(const policy::Target& target_ref, const policy::Decision& d,
                             const VettedAddress& dialled, tcp::socket upstream,
                             audit::ConnectionEvent ev, Slot& slot,
                             std::optional<ParkedUpstreams::Taken> pooled) {
    const policy::Target* target = &target_ref;
    const bool inspect = d.tls == policy::TlsMode::kInspect;
    if (pooled && (!inspect || co_await peek() != Opening::kTls)) {
      // Taken for a tunnel to inspect, which turned out to carry something else: that needs
      // a connection of its own, to the same vetted address.
      parkAgain(*target, std::move(*pooled));
      pooled.reset();
      Watch watch(client_.get_executor());
      std::vector<VettedAddress> same;  // named: g++ 12 rejects a braced list in a co_await
      same.push_back(dialled);
      auto r = co_await dialVetted(conn_.ctx, upstream, watch, same, *target, d.rule_id,
                                   shared_from_this());
      watch.timer.cancel();
      if (!r) {
        recordDeniedConnection(*conn_.ctx, conn_.account(), std::move(ev), r.error());
        conn_.aborted = true;
        co_return false;
      }
    }
    if (!inspect && !d.request_rules) {
      // No rule judges requests to this host and port: bytes are relayed as they are.
      slot.release();
      handOffToTunnel(std::move(upstream), std::move(ev));
      co_return false;
    }
    // A rule judges requests here: the tunnel must carry TLS (inspected when a rule says so,
    // else relayed) or plain HTTP (then every request goes through the pipeline).
    const auto opening = co_await peek();
    if (opening == Opening::kTls && http_only_refusal_) {
      // Allowed only for plain HTTP: TLS here would carry requests no rule can see.
      recordDeniedConnection(*conn_.ctx, conn_.account(), std::move(ev), *http_only_refusal_);
      conn_.aborted = true;
      co_return false;
    }
    if (opening == Opening::kTls && inspect) {
      slot.release();
      handed_off_ = true;
      InspectStart start{*target, d, dialled.endpoint, ev, takeBuffered(), conn_.budget};
      startInspection(conn_.ctx, conn_.listener, {conn_.matcher, conn_.generation},
                      std::move(client_), std::move(upstream), std::move(start), std::move(pooled));
      co_return false;
    }
    if (opening == Opening::kTls) {
      slot.release();
      handOffToTunnel(std::move(upstream), std::move(ev));
      co_return false;
    }
    if (opening == Opening::kHttp) {
      slot.release();  // held by tunnel_up_ until the connection ends
      ev.tls = audit::TlsHandling::kNone;
      tunnel_up_ = std::make_unique<TunnelUpstream>(std::move(upstream), *target, dialled.address,
                                                    std::move(ev));
      exchange_.carry(Carrier::kHttpInTunnel, &tunnel_up_->link, &tunnel_up_->target);
      co_return true;
    }
    Refusal r = opening == Opening::kOther
                    ? refusal(Reason::kNotHttp,
                              "the tunnel to " + target->authority() +
                                  " carries neither HTTP nor TLS, and rule(s) with methods/paths "
                                  "cover it",
                              d.rule_id)
                    : refusal(Reason::kHeaderTimeout,
                              "nothing sent into the tunnel within " +
                                  std::to_string(conn_.ctx->options.header_timeout.count()) + " ms",
                              d.rule_id);
    recordDeniedConnection(*conn_.ctx, conn_.account(), std::move(ev), r);
    conn_.aborted = true;  // no lingering: just close
    co_return false;
  }

  // Reads the tunnel's first bytes (the client's ClientHello or request line) into buf_.
  net::awaitable<Opening> peek() {
    co_return co_await peek(Clock::now() + conn_.ctx->options.header_timeout);
  }
  net::awaitable<Opening> peek(Clock::time_point deadline) {
    for (;;) {
      auto data = buf_.data();
      auto kind =
          classifyOpening(std::string_view(static_cast<const char*>(data.data()), data.size()));
      if (kind != Opening::kMore) co_return kind;
      if (!co_await readMore(deadline, 1024))
        co_return buf_.size() ? Opening::kOther : Opening::kMore;
    }
  }

  std::string takeBuffered() {
    std::string early(static_cast<const char*>(buf_.data().data()), buf_.size());
    buf_ = beast::flat_buffer();
    return early;
  }

  void handOffToTunnel(tcp::socket upstream, audit::ConnectionEvent ev) {
    handed_off_ = true;
    ev.tls = audit::TlsHandling::kPassthrough;
    startTunnel(conn_.ctx, conn_.budget, conn_.workflow().limits, std::move(client_),
                std::move(upstream), takeBuffered(), std::move(ev));
  }

  void endTunnelUpstream() {
    if (!tunnel_up_) return;
    ErrorCode ec;
    tunnel_up_->socket.close(ec);
    finishConnection(*conn_.ctx, conn_.account(), tunnel_up_->row, tunnel_up_->started);
    conn_.account().releaseConnection();
    tunnel_up_.reset();
  }

  tcp::socket client_;
  Watch watch_;
  beast::flat_buffer buf_;
  ConnState conn_;
  OriginLink origin_;
  std::unique_ptr<TunnelUpstream> tunnel_up_;
  Exchange<tcp::socket, tcp::socket> exchange_;
  std::uint64_t live_id_ = 0;
  bool handed_off_ = false;
  bool transparent_ = false;  // a redirected connection (handleTransparent): refusals reset
  // Set when the CONNECT was allowed only for plain HTTP: the refusal TLS in it gets.
  std::optional<Refusal> http_only_refusal_;
};

}  // namespace

void startClientConnection(std::shared_ptr<Context> ctx, std::shared_ptr<Listener> listener,
                           tcp::socket socket) {
  auto s =
      std::make_shared<ClientConnection>(std::move(ctx), std::move(listener), std::move(socket));
  s->begin();
}

}  // namespace sluice::proxy
