// The decision for a tunnel (a CONNECT or a redirected connection) as the proxy's admission
// makes it, callable offline too (`policy replay` re-decides recorded tunnels through it).
#pragma once

#include <optional>

#include "sluice/policy/matcher.hpp"

namespace sluice::policy {

/// A tunnel's decision. When only rules with methods/paths (and no tls: inspect) allow the host
/// and port, the tunnel is allowed for plain HTTP inside it (judged request by request) and
/// `tls_refused` holds the decision TLS inside it gets (inspection_required).
struct TunnelDecision {
  Decision decision;
  std::optional<Decision> tls_refused;
  /// The visibility the address is vetted with (kPlainHttp for a plain-HTTP-only tunnel).
  Visibility visibility() const {
    return tls_refused ? Visibility::kPlainHttp : Visibility::kTunnel;
  }
};

/// The connection phase of a tunnel to `target` (no address yet): Matcher::decide as a tunnel,
/// and when that wants inspection, as plain HTTP. `learn`: Query::learn.
TunnelDecision decideTunnel(const Matcher& matcher, const Target& target, bool learn = false);

/// A tunnel's whole decision as the proxy's admission makes it: the connection phase
/// (decideTunnel), then, when that allows or asks, the address phase at `address` (the SSRF
/// guard, rule cidrs, deny rules with cidrs: Matcher::decide with the address and the tunnel's
/// visibility, as the admission vets every address it dials). An ask is vetted for the rule an
/// approver would allow and stays an ask. `address` null: the connection phase alone. A shadow
/// policy and `policy replay` decide recorded tunnels through it.
Decision decideTunnelAt(const Matcher& matcher, const Target& target, const IpAddress* address,
                        bool learn = false);

}  // namespace sluice::policy
