// Verified TLS connections to an upstream, kept for a moment after the inspected tunnel that
// used them ended, for the next tunnel of the same account to the same target (docs/tls.md,
// "Upstream connections across tunnels"). A client that opens a tunnel per request (curl in a
// loop, most package managers, a fresh HTTP client per call) would otherwise cost the upstream
// a TCP connection and a TLS handshake per request, and the proxy its side of that handshake.
//
// What may be parked: an HTTP/1.1 connection between messages (the last response relayed
// whole, the upstream keeping it open), with nothing unread in any buffer. What a tunnel may
// take: a parked connection of its own account (one execution, or one client of a standalone
// listener) to its target whose address the tunnel's own admission has just vetted, still open
// with nothing to read. Every request on it is decided, injected and recorded as on a fresh
// one; only the transport is reused. Bounded: kPerKey per account and target, kPerAccount per
// account, kTotal in all, each closed after `idle` unused (ProxyOptions::parked_upstream_idle).
#pragma once

#include <chrono>
#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "context.hpp"
#include "tls_context.hpp"
#include "upstream_dial.hpp"

namespace sluice::proxy {

class ParkedUpstreams : public std::enable_shared_from_this<ParkedUpstreams> {
 public:
  static constexpr std::size_t kPerKey = 8;
  /// The places are shared: an account at its share makes room among its own, so one
  /// execution opening tunnels to many targets cannot evict every other's connections.
  static constexpr std::size_t kPerAccount = 16;
  static constexpr std::size_t kTotal = 64;

  explicit ParkedUpstreams(std::chrono::milliseconds idle) : idle_(idle) {}

  /// A connection handed to a tunnel: the stream, the vetted address of the tunnel's admission
  /// it is connected to, and the connections row id of the tunnel that opened it.
  struct Taken {
    SslStream stream;
    VettedAddress vetted;
    std::string opened_by;
  };

  /// Keeps `stream` (connected to `endpoint` for `target`, opened by the tunnel whose row is
  /// `opened_by`) for `account`; closes it instead when the caps are reached or it is not
  /// quiet() (the one check of what is unread for parking). The caller checked that it is idle
  /// at a message boundary with nothing in its HTTP buffer.
  void park(std::shared_ptr<Account> account, const policy::Target& target,
            const tcp::endpoint& endpoint, SslStream stream, std::string opened_by);

  /// The most recently parked connection of `account` to `target` whose address is among
  /// `vetted`, still open with nothing to read; nullopt when there is none. Stale ones met on
  /// the way are closed. The taker drives it from its own strand from then on: its operations'
  /// handlers run on the awaiting coroutine's executor, and the strand it was parked from has
  /// nothing of it left to run (see expire()).
  std::optional<Taken> take(const Account& account, const policy::Target& target,
                            const std::vector<VettedAddress>& vetted);

  /// Closes every connection parked for `account` (its execution ended).
  void dropAccount(const Account& account);
  /// Closes every parked connection (the proxy stops).
  void clear();

  /// True when `stream` is open with nothing unread (hasUnread, link.hpp) and no end of stream
  /// pending.
  static bool quiet(SslStream& stream);

 private:
  struct Entry;
  void expire(const std::shared_ptr<Entry>& e);
  static void close(const std::shared_ptr<Entry>& e);

  const std::chrono::milliseconds idle_;
  mutable std::mutex mu_;
  std::list<std::shared_ptr<Entry>> entries_;  // oldest first
};

}  // namespace sluice::proxy
