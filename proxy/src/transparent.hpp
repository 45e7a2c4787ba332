// Transparent capture (DESIGN.md "Transparent capture and DNS"): a connection the sandbox made to
// some address, redirected by its namespace's nftables rule to the proxy listener, is decided as
// `CONNECT host:port` would be. The port is the original destination's; the host is the name
// sluice's DNS handed out for that address, else the TLS SNI, else the HTTP Host, else the IP
// literal itself (then only `cidrs` rules can allow it). Whatever name is chosen, the proxy
// dials that name's vetted addresses, never the original address.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "sluice/base/net.hpp"
#include "sluice/proxy/synthetic_names.hpp"

namespace sluice::proxy {

/// Where a redirected connection was going (SO_ORIGINAL_DST / IP6T_SO_ORIGINAL_DST); nullopt
/// when it came to the listener's own address (an explicit proxy client) or had no NAT entry.
std::optional<tcp::endpoint> originalDestination(tcp::socket& s);

enum class Peeked { kFound, kAbsent, kMore };
struct NameInOpening {
  Peeked status = Peeked::kMore;
  std::string name;  // lower-case, no trailing dot
};

/// The server name in a TLS ClientHello's SNI extension. kMore until the whole handshake record
/// is in `bytes`; kAbsent for a complete ClientHello without SNI, or one that does not parse.
NameInOpening sniOf(std::string_view bytes);

/// The host of an HTTP request's Host header (port removed). kMore until the header is complete.
NameInOpening httpHostOf(std::string_view bytes);

/// The target a redirected connection to `dst` is decided by, given the first bytes the client
/// sent (`opening`): see the file comment. `names` may be null.
std::string transparentHost(const tcp::endpoint& dst, const SyntheticNames* names,
                            const NameInOpening& from_opening);

}  // namespace sluice::proxy
