// HTTP/1.1 rules the proxy enforces on top of Beast's parser: request smuggling shapes,
// hop-by-hop stripping and Host agreement.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "refusal.hpp"
#include "relay.hpp"
#include "sluice/base/net.hpp"
#include "sluice/policy/matcher.hpp"
#include "sluice/policy/target.hpp"

namespace sluice::proxy {

/// Raw header-block checks Beast does not do: obs-fold (a line starting with SP/HTAB), bare
/// LF line endings and NUL bytes. `block` is the request line + fields + final CRLF CRLF.
std::optional<std::string> checkHeaderBlock(std::string_view block);

/// Framing checks: exactly one Content-Length made of digits, Transfer-Encoding exactly
/// "chunked" and never both, no Transfer-Encoding on HTTP/1.0 (RFC 9112 6.1: a 1.0 message
/// cannot be chunked, and an upstream may read it by Content-Length or to EOF). Returns the
/// refusal (400, or 501 for an unknown coding). `version` is 10 or 11.
std::optional<Refusal> checkFraming(const http::fields& fields, unsigned version = 11);
std::optional<Refusal> checkFraming(const PmrFields& fields, unsigned version = 11);

/// Removes hop-by-hop fields: Connection and every field it lists (never the framing fields
/// Content-Length / Transfer-Encoding / Host, which a hostile Connection list could name to
/// desynchronise us), Proxy-Connection, Proxy-Authorization, Proxy-Authenticate, Keep-Alive,
/// TE, Trailer, Upgrade.
void stripHopByHop(http::fields& fields);
void stripHopByHop(PmrFields& fields);

/// Checks that a Host field (if present; several are refused) names the same host and port
/// as the request target. Returns the problem, if any.
std::optional<std::string> checkHostAgrees(const http::fields& fields, const policy::Target& target,
                                           std::uint16_t default_port);
std::optional<std::string> checkHostAgrees(const PmrFields& fields, const policy::Target& target,
                                           std::uint16_t default_port);

/// The Host field value for an upstream request: the authority, without the port when it is
/// the scheme's default (80 for http, 443 for https).
std::string hostField(const policy::Target& t, std::uint16_t default_port);

}  // namespace sluice::proxy
