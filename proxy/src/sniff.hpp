// What a byte stream starts with, read from its first bytes without consuming them: a TLS
// ClientHello (and the server name in it), an HTTP request (and its Host), or something else.
// The one place the proxy sniffs: a CONNECT tunnel that a rule with methods/paths covers, and a
// redirected connection (transparent.hpp) whose name comes from what the client sends first.
#pragma once

#include <string>
#include <string_view>

namespace sluice::proxy {

/// What the first bytes of a stream are; kMore until there are enough to tell.
enum class Opening { kTls, kHttp, kOther, kMore };
Opening classifyOpening(std::string_view bytes);

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

}  // namespace sluice::proxy
