// The upstream connections of an HTTP/2 inspected tunnel (upstream_pool.hpp).
#include "upstream_pool.hpp"

#include "log.hpp"
#include "upstream_dial.hpp"

namespace sluice::proxy {

// A dialled connection: its stream, and its own connections row (written when it is dropped).
struct UpstreamPool::Owned {
  Owned(const net::any_io_executor& ex, net::ssl::context& tls) : stream(ex, tls), watch(ex) {}
  SslStream stream;
  Watch watch;
  beast::flat_buffer buf;
  audit::ConnectionEvent event;
  Clock::time_point started;
};

UpstreamPool::UpstreamPool(ConnState& conn, SslStream& first, Watch& first_watch,
                           beast::flat_buffer& first_buf, const policy::Target& target,
                           policy::IpAddress vetted, audit::ConnectionEvent& row,
                           std::optional<Refusal> failure)
    : conn_(conn),
      target_(target),
      row_(row),
      failure_(std::move(failure)),
      wake_(first.get_executor()) {
  if (!failure_) entries_.push_back(Entry{&first, &first_watch, &first_buf, vetted, nullptr});
}

UpstreamPool::~UpstreamPool() {
  closeAll();
  while (!entries_.empty()) drop(entries_.begin());
}

net::awaitable<void> UpstreamPool::lease(PooledLink& link, const policy::IpAddress* want) {
  for (;;) {
    if (failure_ || closed_) co_return;  // the link refuses (cannotDial)
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->busy || !beast::get_lowest_layer(*it->stream).is_open()) continue;
      if (!want || it->vetted != *want) continue;  // the decision was about another address
      it->busy = true;
      link.entry_it_ = it;
      link.entry_ = &*it;
      co_return;
    }
    if (entries_.size() + dialling_ < kMaxConnections) {
      ++dialling_;
      link.may_dial_ = true;
      co_return;
    }
    // Every connection carries a stream: wait until one comes back (or closes).
    wake_.expires_at(net::steady_timer::time_point::max());
    ErrorCode ec;
    co_await wake_.async_wait(net::redirect_error(net::use_awaitable, ec));
  }
}

const policy::IpAddress* UpstreamPool::anyOpen() const {
  if (failure_ || closed_) return nullptr;
  for (const auto& e : entries_)
    if (beast::get_lowest_layer(*e.stream).is_open()) return &e.vetted;
  return nullptr;
}

// Links may still hold entries: the sockets close (their exchanges end), the entries stay
// until the links give them back.
void UpstreamPool::closeAll() {
  closed_ = true;
  for (auto& e : entries_) {
    ErrorCode ec;
    beast::get_lowest_layer(*e.stream).close(ec);
    e.watch->timer.cancel();
  }
  wake();
}

void UpstreamPool::giveBack(Iter it) {
  it->busy = false;
  wake();
}

void UpstreamPool::drop(Iter it) {
  ErrorCode ec;
  beast::get_lowest_layer(*it->stream).close(ec);
  it->watch->timer.cancel();
  // A dialled connection has its own row and holds a slot of max_connections (the tunnel's
  // own connection is the tunnel's).
  if (it->owned) {
    finishConnection(*conn_.ctx, conn_.account(), it->owned->event, it->owned->started);
    conn_.account().releaseConnection();
  }
  entries_.erase(it);
  wake();
}

void UpstreamPool::wake() { wake_.cancel(); }

PooledLink::~PooledLink() {
  if (may_dial_) --pool_.dialling_;
  if (entry_it_) pool_.giveBack(*entry_it_);
  if (may_dial_ || entry_it_) pool_.wake();
}

// Before the stream is admitted no connection is lent: the decision is made with the address
// of any open one, and take() lends one to that address.
const policy::IpAddress* PooledLink::openTo(const policy::Target& target) {
  if (target.host != pool_.target_.host || target.port != pool_.target_.port) return nullptr;
  if (!entry_) return may_dial_ ? nullptr : pool_.anyOpen();
  // Bytes no request asked for: this connection must not answer the next request.
  if (entry_->buf->size() > 0) {
    log().warn("upstream {} sent bytes no request asked for; connection closed",
               pool_.target_.authority());
    close();
    return nullptr;
  }
  return &entry_->vetted;
}

net::awaitable<const policy::IpAddress*> PooledLink::take(const policy::Target& target,
                                                          const policy::IpAddress* seen) {
  if (target.host != pool_.target_.host || target.port != pool_.target_.port) co_return nullptr;
  for (;;) {
    co_await pool_.lease(*this, seen);
    if (!entry_) co_return nullptr;  // leave to dial, or the pool refuses (cannotDial)
    if (const auto* vetted = openTo(target)) co_return vetted;
    // openTo closed a connection with bytes no request asked for: another one.
  }
}

std::optional<Refusal> PooledLink::cannotDial(const std::string& rule_id) const {
  if (pool_.failure_) return pool_.failure_;
  if (may_dial_ && !pool_.closed_) return std::nullopt;
  return refusal(
      policy::Reason::kUpstreamError,
      "the upstream connection of this tunnel to " + pool_.target_.authority() + " has ended",
      rule_id);
}

net::awaitable<std::expected<VettedAddress, Refusal>> PooledLink::dial(
    const std::vector<VettedAddress>& addrs, const policy::Target& target,
    const std::string& rule_id) {
  auto& ctx = pool_.conn_.ctx;
  auto owned =
      std::make_unique<UpstreamPool::Owned>(pool_.wake_.get_executor(), ctx->tls->upstream);
  auto dialled = co_await dialVetted(ctx, owned->stream.next_layer(), owned->watch, addrs, target,
                                     rule_id, pool_.conn_.keep_alive());
  if (!dialled) co_return dialled;
  auto refused = co_await upstreamTlsHandshake(owned->stream, owned->watch, target,
                                               ctx->options.connect_timeout, pool_.conn_.keep_alive,
                                               rule_id, /*offer_h2=*/false);
  if (refused) co_return std::unexpected(std::move(*refused));
  if (pool_.closed_) co_return std::unexpected(*cannotDial(rule_id));
  recordAs(*owned, *dialled);
  UpstreamPool::Entry e{&owned->stream, &owned->watch, &owned->buf, dialled->address, nullptr};
  e.owned = std::move(owned);
  e.busy = true;
  auto it = pool_.entries_.insert(pool_.entries_.end(), std::move(e));
  if (may_dial_) --pool_.dialling_;
  may_dial_ = false;
  entry_it_ = it;
  entry_ = &*it;
  co_return dialled;
}

// A dialled connection's row: like the tunnel's (kind, host, port, inspected), allowed by the
// rule its dial was vetted for, at the address it reached.
void PooledLink::recordAs(UpstreamPool::Owned& owned, const VettedAddress& dialled) const {
  const auto& conn = pool_.conn_;
  owned.event =
      connectionRow(*conn.ctx, *conn.listener, conn.workflow(), pool_.row_.kind, conn.generation);
  owned.event.host = pool_.target_.host;
  owned.event.port = pool_.target_.port;
  owned.event.tls = audit::TlsHandling::kInspect;
  allowConnection(owned.event, dialled.endpoint, dialled.decision.rule_id);
  owned.event.detail = "opened by the proxy for the HTTP/2 streams of connection " + pool_.row_.id;
  owned.started = Clock::now();
}

audit::ConnectionEvent& PooledLink::row() {
  return entry_ && entry_->owned ? entry_->owned->event : pool_.row_;
}

void PooledLink::close() {
  if (!entry_it_) return;
  pool_.drop(*entry_it_);
  entry_it_.reset();
  entry_ = nullptr;
}

}  // namespace sluice::proxy
