// TLS inspection of CONNECT tunnels (see inspect.hpp). One Inspection object per tunnel owns
// both TLS streams on the connection's strand: it sets up the two TLS sessions, then hands
// each request to the exchange pipeline, as plain HTTP is handled.
#include "inspect.hpp"

#include <openssl/err.h>
#include <openssl/x509v3.h>

#include <array>

#include "approval_wait.hpp"
#include "audit_rows.hpp"
#include "exchange.hpp"
#include "h2_exchange.hpp"
#include "h2_upstream.hpp"
#include "log.hpp"
#include "policy_cut.hpp"
#include "sluice/base/net_tls.hpp"
#include "tls_context.hpp"
#include "upstream_dial.hpp"
#include "upstream_pool.hpp"

namespace sluice::proxy {

namespace {

using policy::Reason;
namespace ssl = net::ssl;

class Inspection : public std::enable_shared_from_this<Inspection>, public Closable {
 public:
  Inspection(std::shared_ptr<Context> ctx, std::shared_ptr<Listener> listener,
             PolicySnapshot policy, tcp::socket client, tcp::socket upstream, InspectStart start,
             std::optional<ParkedUpstreams::Taken> pooled)
      : start_(std::move(start)),
        event_(start_.event),
        client_(std::move(client), ctx->tls->server),
        // A parked connection as it is; else a TLS stream over the connection dialled for us.
        upstream_(pooled ? std::move(pooled->stream)
                         : SslStream(std::move(upstream), ctx->tls->upstream)),
        client_watch_(client_.get_executor()),
        upstream_watch_(client_.get_executor()),
        conn_{ctx, listener, policy.matcher, start_.account, {}, {}, false, false},
        link_(upstream_, upstream_watch_, ubuf_, start_.target,
              toIpAddress(start_.upstream_endpoint), event_),
        exchange_(conn_, client_, client_watch_, cbuf_),
        started_(Clock::now()) {
    conn_.keep_alive = [this] { return std::shared_ptr<void>(shared_from_this()); };
    conn_.generation = policy.generation;
    exchange_.carry(Carrier::kInspected, &link_, &start_.target);
    if (pooled) {
      pooled_from_ = std::move(pooled->opened_by);
      link_.takenFromPark(
          [this](const std::vector<VettedAddress>& addrs, const std::string& rule_id) {
            return replaceUpstream(addrs, rule_id, /*slot_taken=*/true);
          });
    }
    ctx->live.fetch_add(1);
  }

  ~Inspection() override {
    // One connections row per tunnel, written when it ends (allowed or refused).
    finishConnection(*conn_.ctx, conn_.account(), event_, started_);
    conn_.account().releaseConnection();
    conn_.account().unregisterLive(live_id_);
    conn_.ctx->live.fetch_sub(1);
  }

  void begin() {
    live_id_ = conn_.account().registerLive(weak_from_this());
    net::co_spawn(client_.get_executor(), run(shared_from_this()),
                  LogEscapedException{"inspected connection"});
  }

  void abort() override {
    auto self = shared_from_this();
    net::post(client_.get_executor(), [self] {
      self->conn_.aborted = true;
      withdrawApproval(self->conn_);
      self->closeBoth();
    });
  }

  void redecide(const PolicySnapshot& p) override {
    auto self = shared_from_this();
    net::post(client_.get_executor(), [self, p] {
      auto why = tunnelRefusedBy(p, self->event_);
      if (!why || self->conn_.aborted) return;
      markCut(self->event_, p, std::move(*why));
      log().info("inspected tunnel {} cut: {}", self->event_.id, self->event_.detail);
      self->conn_.aborted = true;
      withdrawApproval(self->conn_);
      self->closeBoth();
    });
  }

  void closeIfIdle() override {
    auto self = shared_from_this();
    net::post(client_.get_executor(), [self] {
      if (self->h2_)
        self->h2_->drain();  // GOAWAY: open streams finish
      else if (self->conn_.idle)
        self->closeBoth();
    });
  }

 private:
  const policy::Target& target() const { return start_.target; }

  void closeBoth() {
    ErrorCode ec;
    client_.next_layer().close(ec);
    if (!parked_) beast::get_lowest_layer(upstream_).close(ec);
  }

  static net::awaitable<void> run(std::shared_ptr<Inspection> self) {
    co_await self->main();
    self->park();
    self->closeBoth();
    self->client_watch_.timer.cancel();
    self->upstream_watch_.timer.cancel();
  }

  net::awaitable<void> main() {
    // The client's TLS comes first so that an upstream certificate failure can be answered
    // inside the tunnel, as an HTTP 502 with the reason the client's HTTP library shows.
    event_.tls = audit::TlsHandling::kInspect;
    if (!co_await clientHandshake()) co_return;
    auto refused = co_await upstreamReady();
    if (refused) {
      denyConnection(event_, *refused);
      log().info("deny connect {} rule={} reason={}: {}", target().authority(),
                 refused->rule.empty() ? "-" : refused->rule, event_.reason, refused->detail);
    }
    if (negotiatedAlpn(client_) == "h2") {
      co_await serveHttp2(std::move(refused));
    } else {
      if (refused) link_.fail(std::move(*refused));
      co_await serveHttp1();
    }
    if (!conn_.aborted) {
      co_await drainUnread();
      ErrorCode ec;
      {
        Deadline d(client_watch_, client_.next_layer(), Clock::now() + std::chrono::seconds(1),
                   conn_.keep_alive);
        co_await client_.async_shutdown(net::redirect_error(net::use_awaitable, ec));
      }
      co_await linger();
    }
  }

  // A client still sending when the exchange ended (the rest of an upload refused with 413)
  // has its records read and dropped, bounded in time and bytes, so that it finishes sending
  // and reads the refusal instead of meeting a reset. A client that sent nothing more is not
  // waited for (a response delimited by the close must end at once).
  net::awaitable<void> drainUnread() {
    ErrorCode ec;
    auto& tcp = client_.next_layer();
    if (tcp.available(ec) == 0 && SSL_pending(client_.native_handle()) == 0) co_return;
    const auto deadline = Clock::now() + std::chrono::seconds(1);
    std::array<char, 16384> sink;
    for (std::size_t drained = 0; drained < (4u << 20);) {
      Deadline d(client_watch_, tcp, deadline, conn_.keep_alive);
      drained += co_await client_.async_read_some(net::buffer(sink),
                                                  net::redirect_error(net::use_awaitable, ec));
      if (ec) co_return;
    }
  }

  // Closing with unread input (the rest of a refused upload) makes the kernel answer with RST,
  // which can destroy the refusal just sent before the client has read it: end our side, then
  // read and discard for a moment (nginx's lingering close, as client_connection.cpp does for
  // plain connections), bounded in time and bytes.
  net::awaitable<void> linger() {
    constexpr std::size_t kMaxDiscard = 256 * 1024;
    auto& tcp = client_.next_layer();
    ErrorCode ec;
    tcp.shutdown(tcp::socket::shutdown_send, ec);
    if (ec) co_return;
    const auto deadline = Clock::now() + std::chrono::seconds(1);
    std::array<char, 4096> sink;
    for (std::size_t discarded = 0; discarded < kMaxDiscard;) {
      Deadline d(client_watch_, tcp, deadline, conn_.keep_alive);
      discarded += co_await tcp.async_read_some(net::buffer(sink),
                                                net::redirect_error(net::use_awaitable, ec));
      if (ec) co_return;
    }
  }

  // HTTP/1.1: one request after another through the exchange, on the tunnel's connection.
  net::awaitable<void> serveHttp1() {
    bool first = true;
    for (;;) {
      auto next = co_await exchange_.next(first);
      first = false;
      if (next != Exchange<SslStream, SslStream>::Next::kContinue) break;
    }
  }

  // HTTP/2: each stream an exchange of its own (h2_exchange.hpp), multiplexed on the tunnel's
  // connection when the upstream speaks h2 too, else on HTTP/1.1 connections of a pool that
  // starts with the tunnel's.
  net::awaitable<void> serveHttp2(std::optional<Refusal> upstream_failure) {
    const auto vetted = toIpAddress(start_.upstream_endpoint);
    std::shared_ptr<H2Upstream> h2_upstream;
    if (!upstream_failure && negotiatedAlpn(upstream_) == "h2") {
      h2_upstream =
          std::make_shared<H2Upstream>(conn_, upstream_, upstream_watch_, target(), vetted, event_);
      net::co_spawn(client_.get_executor(), H2Upstream::run(h2_upstream),
                    LogEscapedException{"h2 upstream"});
    }
    h2_served_ = true;
    std::shared_ptr<UpstreamPool> pool;
    if (!h2_upstream)
      pool = std::make_shared<UpstreamPool>(conn_, upstream_, upstream_watch_, ubuf_, target(),
                                            vetted, event_, std::move(upstream_failure));
    h2_ = makeH2Front(H2Tunnel{shared_from_this(), conn_, client_, client_watch_, target(),
                               std::move(pool), h2_upstream});
    co_await h2_->run();
    h2_.reset();  // the front holds this tunnel (owner): no cycle once it has served
  }

  // The upstream ready for the first request: a parked connection still open with nothing to
  // read, else a verified TLS handshake on the connection dialled for this tunnel (or, when
  // the parked one went stale meanwhile, on a new one to the same vetted address).
  net::awaitable<std::optional<Refusal>> upstreamReady() {
    if (!pooled_from_.empty()) {
      if (ParkedUpstreams::quiet(upstream_)) {
        // The row says whose verified connection carried this tunnel (an approval or a learned
        // decision already in `detail` stays).
        if (event_.detail.empty())
          event_.detail = "upstream connection kept from tunnel " + pooled_from_;
        log().debug("inspected tunnel {} reuses the upstream connection of {}", event_.id,
                    pooled_from_);
        co_return std::nullopt;
      }
      pooled_from_.clear();
      link_.takenFromPark(nullptr);
      std::vector<VettedAddress> same;  // named: g++ 12 rejects a braced list in a co_await
      same.push_back(VettedAddress{start_.upstream_endpoint, toIpAddress(start_.upstream_endpoint),
                                   start_.decision});
      auto replaced = co_await replaceUpstream(same, start_.decision.rule_id, false);
      if (!replaced) co_return std::move(replaced.error());
      co_return std::nullopt;
    }
    co_return co_await upstreamHandshake();
  }

  // A new, verified connection to one of `addrs` in place of the parked one this tunnel took
  // (closed meanwhile). `slot_taken`: the exchange's redial took a connection slot for it,
  // which the tunnel's own (held since its CONNECT) already covers.
  net::awaitable<std::expected<VettedAddress, Refusal>> replaceUpstream(
      const std::vector<VettedAddress>& addrs, const std::string& rule_id, bool slot_taken) {
    tcp::socket fresh(client_.get_executor());
    auto dialled = co_await dialVetted(conn_.ctx, fresh, upstream_watch_, addrs, target(), rule_id,
                                       conn_.keep_alive());
    upstream_watch_.timer.cancel();
    if (!dialled) co_return dialled;
    ErrorCode ec;
    beast::get_lowest_layer(upstream_).close(ec);
    upstream_ = SslStream(std::move(fresh), conn_.ctx->tls->upstream);
    if (auto refused = co_await upstreamHandshake()) co_return std::unexpected(std::move(*refused));
    if (slot_taken) conn_.account().releaseConnection();
    const std::string kept = "upstream connection kept from tunnel " + pooled_from_;
    if (!pooled_from_.empty() && event_.detail == kept)
      event_.detail = kept + " was closed before the first request; a new one was dialled";
    log().debug("inspected tunnel {} replaced the closed upstream connection of {}", event_.id,
                pooled_from_.empty() ? std::string("-") : pooled_from_);
    co_return dialled;
  }

  // An HTTP/1.1 tunnel whose upstream connection is idle between messages, open, with nothing
  // unread, leaves it for the next tunnel of its account to the same target.
  void park() {
    auto& parked = conn_.ctx->parked;
    if (!parked || h2_served_ || conn_.aborted || conn_.ctx->draining.load() || !link_.reusable())
      return;  // (park() itself closes a connection with anything unread)
    parked->park(start_.account, target(), start_.upstream_endpoint, std::move(upstream_),
                 event_.id);
    parked_ = true;
  }

  // Verified TLS to the upstream; the refusal when it fails. An h2 client gets h2 offered
  // upstream too; an HTTP/1.1 client only http/1.1 (its exchange speaks nothing else).
  net::awaitable<std::optional<Refusal>> upstreamHandshake() {
    return upstreamTlsHandshake(upstream_, upstream_watch_, target(),
                                conn_.ctx->options.connect_timeout, conn_.keep_alive,
                                start_.decision.rule_id, negotiatedAlpn(client_) == "h2");
  }

  net::awaitable<bool> clientHandshake() {
    const auto& t = target();
    auto leaf = conn_.ctx->tls->ca->leafFor(t.host);
    if (!leaf) {
      endConnection(event_, Reason::kTlsError,
                    "cannot mint a certificate for " + t.host + ": " + leaf.error());
      log().error("{}", event_.detail);
      co_return false;
    }
    SSL* ssl = client_.native_handle();
    if (SSL_use_certificate(ssl, (*leaf)->certificate()) != 1 ||
        SSL_use_PrivateKey(ssl, (*leaf)->privateKey()) != 1) {
      endConnection(event_, Reason::kTlsError, "cannot use the minted certificate: " + sslError());
      co_return false;
    }
    sni_.expected = t.ip ? std::string() : t.host;
    watchSni(ssl, &sni_);
    ErrorCode ec;
    {
      Deadline d(client_watch_, client_.next_layer(),
                 Clock::now() + conn_.ctx->options.header_timeout, conn_.keep_alive);
      // The ClientHello the client connection peeked at goes to OpenSSL first.
      co_await client_.async_handshake(ssl::stream_base::server, net::buffer(start_.early),
                                       net::redirect_error(net::use_awaitable, ec));
    }
    watchSni(ssl, nullptr);
    ERR_clear_error();
    if (!ec) co_return true;
    if (sni_.mismatch) {
      denyConnection(event_,
                     refusal(Reason::kHostMismatch,
                             "TLS SNI '" + sni_.seen + "' does not name the CONNECT target " +
                                 t.authority() + " (domain fronting refused)",
                             event_.rule_id));
      log().info("deny connect {}: {}", t.authority(), event_.detail);
    } else {
      endConnection(event_, Reason::kTlsHandshakeFailed,
                    "client TLS handshake failed: " + ec.message());
    }
    co_return false;
  }

  InspectStart start_;
  audit::ConnectionEvent event_;
  SslStream client_;
  SslStream upstream_;
  Watch client_watch_;
  Watch upstream_watch_;
  beast::flat_buffer cbuf_;
  beast::flat_buffer ubuf_;
  ConnState conn_;
  FixedLink<SslStream> link_;
  Exchange<SslStream, SslStream> exchange_;
  SniCheck sni_;
  std::shared_ptr<H2Front> h2_;  // when the client speaks HTTP/2
  Clock::time_point started_;
  std::uint64_t live_id_ = 0;
  std::string pooled_from_;  // the row id of the tunnel whose parked connection this one took
  bool h2_served_ = false;   // HTTP/2 from the client: its upstream connections are not parked
  bool parked_ = false;      // upstream_ was handed to ParkedUpstreams
};

}  // namespace

void startInspection(std::shared_ptr<Context> ctx, std::shared_ptr<Listener> listener,
                     PolicySnapshot policy, tcp::socket client, tcp::socket upstream,
                     InspectStart start, std::optional<ParkedUpstreams::Taken> pooled) {
  auto s = std::make_shared<Inspection>(std::move(ctx), std::move(listener), std::move(policy),
                                        std::move(client), std::move(upstream), std::move(start),
                                        std::move(pooled));
  s->begin();
}

}  // namespace sluice::proxy
