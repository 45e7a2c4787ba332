// Reaching an upstream: resolve the host in the proxy (never in the sandbox), vet every
// address with the policy (the same Matcher::decide call, with the address: SSRF guard, rule
// cidrs, deny rules with cidrs) and the loop guard, then dial only vetted addresses (no second
// lookup, so no DNS rebinding between check and use).
#pragma once

#include <expected>
#include <memory>
#include <vector>

#include "context.hpp"
#include "deadline.hpp"
#include "refusal.hpp"

namespace sluice::proxy {

/// One address that passed the policy, and the decision for it.
struct VettedAddress {
  tcp::endpoint endpoint;
  policy::IpAddress address;
  policy::Decision decision;
};

/// Resolves `q.target` (unless an IP literal) and decides `q` at every address. All must pass:
/// a name that resolves to one public and one private address is refused (rebinding shape).
net::awaitable<std::expected<std::vector<VettedAddress>, Refusal>> vetAddresses(
    std::shared_ptr<Context> ctx, std::shared_ptr<const policy::Matcher> matcher, policy::Query q,
    std::string rule_id);

/// Dials the vetted addresses in order on `sock`: the one connected, or 502 (refused,
/// unreachable) / 504 (connect_timeout). `keep` holds the caller alive while timers run.
net::awaitable<std::expected<VettedAddress, Refusal>> dialVetted(
    std::shared_ptr<Context> ctx, tcp::socket& sock, Watch& watch,
    const std::vector<VettedAddress>& addrs, const policy::Target& target, std::string rule_id,
    std::shared_ptr<void> keep);

tcp::endpoint toEndpoint(const policy::IpAddress& a, std::uint16_t port);
policy::IpAddress toIpAddress(const tcp::endpoint& ep);

}  // namespace sluice::proxy
