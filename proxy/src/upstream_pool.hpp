// The HTTP/1.1 upstream connections of an inspected tunnel whose client speaks HTTP/2: the
// client's streams run at once, each as one HTTP/1.1 exchange, so each borrows a connection
// to the CONNECT target for its exchange. The tunnel's own connection is the first; more are
// dialled on demand (through the admission's slot, vet and dial steps, to the same target,
// verified TLS like the first), up to kMaxConnections; beyond that a stream waits for one to
// come back. All on the tunnel's strand. A dialled connection has a connections row of its
// own, which counts its bytes; the tunnel's row counts those of the tunnel's own connection.
#pragma once

#include <list>
#include <memory>
#include <optional>

#include "exchange.hpp"
#include "link.hpp"
#include "tls_context.hpp"

namespace sluice::proxy {

class PooledLink;

class UpstreamPool {
 public:
  static constexpr std::size_t kMaxConnections = 6;

  /// `first` is the tunnel's connection (TLS done, unless `failure` says why it failed).
  UpstreamPool(ConnState& conn, SslStream& first, Watch& first_watch, beast::flat_buffer& first_buf,
               const policy::Target& target, policy::IpAddress vetted, audit::ConnectionEvent& row,
               std::optional<Refusal> failure);
  ~UpstreamPool();

  /// Gives `link` an idle connection to `want` (the vetted address its decision saw; null:
  /// none), or leave to dial one; waits while neither is possible.
  net::awaitable<void> lease(PooledLink& link, const policy::IpAddress* want);
  /// The vetted address of an open connection, for a decision before any is lent (null: none).
  const policy::IpAddress* anyOpen() const;
  /// Closes every connection (the tunnel is over).
  void closeAll();

 private:
  friend class PooledLink;
  struct Owned;  // a dialled connection's stream, watch, buffer and row
  struct Entry {
    SslStream* stream;
    Watch* watch;
    beast::flat_buffer* buf;
    policy::IpAddress vetted;
    std::unique_ptr<Owned> owned;  // null for the tunnel's own connection
    bool busy = false;
    std::uint64_t uses = 0;
  };
  using Iter = std::list<Entry>::iterator;
  void giveBack(Iter it);
  void drop(Iter it);
  void wake();

  ConnState& conn_;
  const policy::Target& target_;
  audit::ConnectionEvent& row_;
  std::optional<Refusal> failure_;
  std::list<Entry> entries_;
  std::size_t dialling_ = 0;  // leases that may dial a connection
  net::steady_timer wake_;
  bool closed_ = false;
};

/// One stream's upstream: the connection it borrowed once admitted, or the leave to dial one.
class PooledLink final : public UpstreamLink<SslStream> {
 public:
  explicit PooledLink(UpstreamPool& pool) : pool_(pool) {}
  ~PooledLink() override;

  const policy::IpAddress* openTo(const policy::Target& target) override;
  net::awaitable<const policy::IpAddress*> take(const policy::Target& target,
                                                const policy::IpAddress* seen) override;
  std::optional<Refusal> cannotDial(const std::string& rule_id) const override;
  net::awaitable<std::expected<VettedAddress, Refusal>> dial(
      const std::vector<VettedAddress>& addrs, const policy::Target& target,
      const std::string& rule_id) override;
  SslStream& stream() override { return *entry_->stream; }
  Watch& watch() override { return *entry_->watch; }
  beast::flat_buffer& buffer() override { return *entry_->buf; }
  /// The connection's own row when the pool dialled it, else the tunnel's.
  audit::ConnectionEvent& row() override;
  bool reused() const override { return entry_ && entry_->uses > 0; }
  // A borrowed connection the upstream closed while idle: the request goes on a new one.
  bool canRedial() const override { return !pool_.failure_ && !pool_.closed_; }
  void used() override { ++entry_->uses; }
  void close() override;
  std::string refusedConnection(const policy::Target*, const Refusal&,
                                const audit::PolicyStamp&) override {
    return pool_.row_.id;
  }

 private:
  friend class UpstreamPool;
  void recordAs(UpstreamPool::Owned& owned, const VettedAddress& dialled) const;
  UpstreamPool& pool_;
  std::optional<UpstreamPool::Iter> entry_it_;
  UpstreamPool::Entry* entry_ = nullptr;
  bool may_dial_ = false;
};

}  // namespace sluice::proxy
