// What a live policy update cuts: an open tunnel the new policy no longer admits, decided with
// policy::decideTunnel (the admission's own tunnel decision), in one place for every kind of
// tunnel (CONNECT passthrough, plain HTTP in a tunnel, inspected, transparent).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "policy_snapshot.hpp"
#include "sluice/audit/event_sink.hpp"
#include "sluice/proxy/approvals.hpp"

namespace sluice::proxy {

/// Why `p` refuses the open tunnel `row` describes (its host, port and TLS handling), or none
/// when it still admits it. A passthrough tunnel is cut when the new policy wants it inspected
/// or allows only plain HTTP there; requests inside seen tunnels are judged one by one anyway.
/// The address it connected to (`row.resolved_ip`) is vetted again as the admission vets it
/// (the SSRF guard, the rules' cidrs).
std::optional<std::string> tunnelRefusedBy(const PolicySnapshot& p,
                                           const audit::ConnectionEvent& row);

/// What `p` says of what approval `a` holds: a tunnel decided as the admission decides it, a
/// request as plain HTTP by its method and path (in learn mode when `p.learn`).
enum class AskedVerdict : std::uint8_t { kAllows, kAsks, kRefuses };
AskedVerdict decideAsked(const PolicySnapshot& p, const Approval& a);

/// Ends `row` as cut by the update to `p`: reason policy_changed, `why`, p's generation.
void markCut(audit::ConnectionEvent& row, const PolicySnapshot& p, std::string why);

}  // namespace sluice::proxy
