// Transparent capture (DESIGN.md "Transparent capture and DNS"): a connection the sandbox made to
// some address, redirected by its namespace's nftables rule to the proxy listener, is decided as
// `CONNECT host:port` would be. The port is the original destination's; the host is the name
// sluice's DNS handed out for that address, else the TLS SNI, else the HTTP Host, else the IP
// literal itself (then only `cidrs` rules can allow it). Whatever name is chosen, the proxy
// dials that name's vetted addresses, never the original address.
#pragma once

#include <optional>
#include <string>

#include "sluice/base/net.hpp"
#include "sluice/proxy/synthetic_names.hpp"
#include "sniff.hpp"

namespace sluice::proxy {

/// Where a redirected connection was going (SO_ORIGINAL_DST / IP6T_SO_ORIGINAL_DST); nullopt
/// when it came to the listener's own address (an explicit proxy client) or had no NAT entry.
std::optional<tcp::endpoint> originalDestination(tcp::socket& s);

/// The target a redirected connection to `dst` is decided by, given the first bytes the client
/// sent (`opening`): see the file comment. `names` may be null.
std::string transparentHost(const tcp::endpoint& dst, const SyntheticNames* names,
                            const NameInOpening& from_opening);

}  // namespace sluice::proxy
