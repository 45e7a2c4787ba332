// The upstream side of the one exchange pipeline. Whatever carried a request (plain HTTP to
// any origin, plain HTTP inside a CONNECT tunnel, an inspected TLS tunnel), the pipeline
// decides, records and forwards it the same way; what differs is how it reaches the upstream,
// and that lives behind this small interface.
#pragma once

#include <expected>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "audit_rows.hpp"
#include "upstream_dial.hpp"

namespace boost::beast {
template <class NextLayer>
class ssl_stream;
}  // namespace boost::beast

namespace sluice::proxy {

/// Bytes no request asked for are waiting on an upstream connection (in its socket; for TLS
/// also in OpenSSL's record buffer and read BIO), or it has failed: it must not carry the next
/// request, which it would answer with them (an upstream that read a second request out of a
/// body, a stray response). The one check every upstream link makes before reuse.
bool hasUnread(tcp::socket& s);
bool hasUnread(beast::ssl_stream<tcp::socket>& s);  // tls_context.cpp

/// Where an admitted tunnel or request goes out (admission.hpp): an open connection it may
/// reuse, or a new one dialled to the addresses the admission vetted.
class Outlet {
 public:
  virtual ~Outlet() = default;

  /// The vetted address of an open connection to `target` that may carry the next request,
  /// or null. A connection that received bytes no request asked for is closed here (an
  /// upstream that answered a request it read out of a body must not answer the next one).
  virtual const policy::IpAddress* openTo(const policy::Target& target) = 0;

  /// Why no new connection can be opened here (a tunnel whose one upstream has ended), or
  /// nullopt. Asked before a slot is taken or an address vetted.
  virtual std::optional<Refusal> cannotDial(const std::string& rule_id) const = 0;

  /// The open connection an admitted request goes out on: `seen` is what openTo() gave the
  /// decision. An outlet that lends connections (an HTTP/2 tunnel's pool) lends one only here,
  /// after the decision, approval and budget, so a refused request never waits for or holds
  /// one; it lends only a connection to the address the decision saw. Null: dial a new one.
  virtual net::awaitable<const policy::IpAddress*> take(const policy::Target& /*target*/,
                                                        const policy::IpAddress* seen) {
    co_return seen;
  }

  /// The admission's decision, just before it vets and dials for a new connection: an outlet
  /// may choose how it connects by it (a tunnel to be inspected may take a parked TLS
  /// connection, parked_upstreams.hpp). Decides nothing.
  virtual void decided(const policy::Decision& /*d*/) {}

  /// Dials `addrs` (vetted, in order) for `target`. On success the outlet holds the connection
  /// slot the admission took for it.
  virtual net::awaitable<std::expected<VettedAddress, Refusal>> dial(
      const std::vector<VettedAddress>& addrs, const policy::Target& target,
      const std::string& rule_id) = 0;
};

template <typename Stream>
class UpstreamLink : public Outlet {
 public:
  virtual Stream& stream() = 0;
  virtual Watch& watch() = 0;
  virtual beast::flat_buffer& buffer() = 0;
  /// The connections row the traffic is counted on.
  virtual audit::ConnectionEvent& row() = 0;
  /// The open connection already carried a request (a failure may mean it went stale).
  virtual bool reused() const = 0;
  /// May a request that failed on a stale reused connection be sent again on a new one?
  virtual bool canRedial() const = 0;
  /// A request was sent on the open connection.
  virtual void used() = 0;
  /// The response to the request last sent was relayed whole and the upstream keeps the
  /// connection open: it is between messages again.
  virtual void idle() {}
  /// Ends the open connection (its row is written when it is the link's own).
  virtual void close() = 0;
  /// The connection id a refused request's row names. Plain HTTP writes a denied connections
  /// row for it, with the shadow decision of the request (`request`: its row's stamp, which
  /// decided it); a tunnel names its own.
  virtual std::string refusedConnection(const policy::Target* target, const Refusal& r,
                                        const audit::PolicyStamp& request) = 0;
};

/// The upstream of a tunnel: one connection to the CONNECT target, dialled and vetted before
/// the tunnel was established. It cannot be redialled; once closed, the tunnel is over, and a
/// link that failed at set-up (an upstream certificate that does not verify) gives every
/// request that would need a new connection that refusal. The one exception: a connection
/// another tunnel parked (parked_upstreams.hpp) may be replaced once, if it turns out closed
/// when the tunnel's first request goes out (takenFromPark).
template <typename Stream>
class FixedLink final : public UpstreamLink<Stream> {
 public:
  FixedLink(Stream& stream, Watch& watch, beast::flat_buffer& buf, const policy::Target& target,
            policy::IpAddress vetted, audit::ConnectionEvent& row)
      : stream_(stream), watch_(watch), buf_(buf), target_(target), vetted_(vetted), row_(row) {}

  void fail(Refusal r) { failure_ = std::move(r); }

  /// Dials a new connection in place of the open one: `addrs` vetted by the admission.
  using Redial = std::function<net::awaitable<std::expected<VettedAddress, Refusal>>(
      const std::vector<VettedAddress>& addrs, const std::string& rule_id)>;
  /// The open connection was parked by another tunnel: it counts as reused, and until its
  /// first response `redial` may replace it once (a kept-alive connection the upstream closed
  /// just before the request went out; the exchange resends a request without a body once).
  void takenFromPark(Redial redial) { redial_ = std::move(redial); }

  const policy::IpAddress* openTo(const policy::Target& target) override {
    if (failure_ || closed_ || target.host != target_.host || target.port != target_.port)
      return nullptr;
    // (Before the first request, TLS 1.3 session tickets may still be arriving: bytes are
    // unasked-for only once a response has been relayed.)
    if (buf_.size() > 0 || (uses_ > 0 && hasUnread(stream_))) {
      close();
      return nullptr;
    }
    return &vetted_;
  }
  std::optional<Refusal> cannotDial(const std::string& rule_id) const override {
    if (failure_) return failure_;
    if (redial_) return std::nullopt;
    return networkFailure(
        policy::Reason::kUpstreamError, kFailureReset,
        "the upstream connection of this tunnel to " + target_.authority() + " has ended", rule_id);
  }
  net::awaitable<std::expected<VettedAddress, Refusal>> dial(
      const std::vector<VettedAddress>& addrs, const policy::Target&,
      const std::string& rule_id) override {
    if (!redial_) co_return std::unexpected(*cannotDial(rule_id));
    const Redial redial = std::move(redial_);  // once
    redial_ = nullptr;
    auto r = co_await redial(addrs, rule_id);
    if (r) {
      closed_ = false;
      uses_ = 0;
      between_messages_ = false;
    }
    co_return r;
  }
  Stream& stream() override { return stream_; }
  Watch& watch() override { return watch_; }
  beast::flat_buffer& buffer() override { return buf_; }
  audit::ConnectionEvent& row() override { return row_; }
  bool reused() const override { return uses_ > 0 || static_cast<bool>(redial_); }
  bool canRedial() const override { return static_cast<bool>(redial_); }
  void used() override {
    ++uses_;
    between_messages_ = false;
  }
  void idle() override {
    between_messages_ = true;
    redial_ = nullptr;  // it answered: from now on this tunnel's own connection
  }
  /// Open, carried at least one request, at a message boundary, nothing in the HTTP buffer:
  /// what ParkedUpstreams may keep (its park() checks the TLS buffers and the socket).
  bool reusable() const {
    return !failure_ && !closed_ && uses_ > 0 && between_messages_ && buf_.size() == 0;
  }
  void close() override {
    closed_ = true;
    ErrorCode ec;
    beast::get_lowest_layer(stream_).close(ec);
  }
  std::string refusedConnection(const policy::Target*, const Refusal&,
                                const audit::PolicyStamp&) override {
    return row_.id;
  }

 private:
  Stream& stream_;
  Watch& watch_;
  beast::flat_buffer& buf_;
  const policy::Target& target_;
  policy::IpAddress vetted_;
  audit::ConnectionEvent& row_;
  std::optional<Refusal> failure_;
  std::uint64_t uses_ = 0;
  bool closed_ = false;
  bool between_messages_ = false;  // idle() since the last used()
  Redial redial_;                  // set by takenFromPark until the first response
};

}  // namespace sluice::proxy
