// Holding a connection or request that an `action: ask` rule matched until the listener's
// approval desk decides (sluice/proxy/approvals.hpp). The one place the proxy turns an ask
// decision into an allow or a refusal: CONNECT and transparent tunnels (no method or path) and
// every request (plain HTTP, HTTP inside a tunnel, inspected TLS) go through it.
#pragma once

#include <expected>
#include <string>

#include "exchange.hpp"
#include "refusal.hpp"
#include "sluice/base/net.hpp"
#include "sluice/policy/matcher.hpp"

namespace sluice::proxy {

/// Raises an approval for `d` (d.ask) on `conn`'s listener and waits, without blocking the
/// thread, for its answer. Allowed: `d` as an allow by its rule (decide again with
/// Query::approved_rule = its rule_id to vet the address). Otherwise the refusal to give
/// (approval_denied, approval_timeout, approval_unavailable, execution_ended, closed).
/// `method` and `path` are null for a tunnel. `client` (the connection's socket) is watched
/// meanwhile: if the client hangs up, the approval is withdrawn (reason closed).
net::awaitable<std::expected<policy::Decision, Refusal>> awaitApproval(
    ConnState& conn, const policy::Decision& d, const policy::Target& target,
    const std::string* method, const std::string* path, tcp::socket& client);

/// Called when the connection is closed from outside: withdraws the approval it waits for.
void withdrawApproval(ConnState& conn);

}  // namespace sluice::proxy
