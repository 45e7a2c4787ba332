// A CONNECT tunnel after "200 Connection established": two pumps relaying bytes each way on
// one strand, half-close, idle timeout, byte limits, and one audit row when it ends.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "context.hpp"
#include "sluice/base/net.hpp"

namespace sluice::proxy {

/// Starts relaying between `client` and `upstream` (both on the same strand). `initial_up`
/// holds bytes the client sent after the CONNECT header (e.g. an eager TLS ClientHello);
/// they are forwarded first. `event` is the connection row, completed when the tunnel ends.
/// The caller has already taken a connection slot from `account`; the tunnel releases it.
void startTunnel(std::shared_ptr<Context> ctx, std::shared_ptr<Account> account,
                 policy::EgressLimits limits, tcp::socket client, tcp::socket upstream,
                 std::string initial_up, audit::ConnectionEvent event);

}  // namespace sluice::proxy
