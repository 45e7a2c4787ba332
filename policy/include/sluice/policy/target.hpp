// Destinations: a host (name or IP literal) and a port, normalised once before matching.
#pragma once

#include <cstdint>
#include <expected>
#include <optional>
#include <string>
#include <string_view>

#include "sluice/policy/ip_address.hpp"

namespace sluice::policy {

/// A normalised destination. For a name, `host` is lower-case without a trailing dot;
/// for an IP literal in any spelling, `ip` is set and `host` is its canonical text.
struct Target {
  std::string host;
  std::optional<IpAddress> ip;
  std::uint16_t port = 0;

  bool isIpLiteral() const { return ip.has_value(); }
  /// `host:port`, with brackets around IPv6.
  std::string authority() const;
};

/// Normalises a host name: lower-case ASCII, trailing dot removed, labels checked
/// (1-63 chars of [a-z0-9-_], not starting or ending with '-', total <= 253).
/// Non-ASCII is refused (write punycode). Error text says why.
std::expected<std::string, std::string> normalizeHostName(std::string_view host);

/// Makes a Target from a host (bracketed IPv6 allowed) and a port.
std::expected<Target, std::string> makeTarget(std::string_view host, std::uint16_t port);

/// Parses a CONNECT authority `host:port` / `[v6]:port` (the port is required).
std::expected<Target, std::string> parseAuthority(std::string_view authority);

/// The parts of an absolute URL the policy needs (`http://host[:port]/path?query`).
struct ParsedUrl {
  std::string scheme;  // "http" or "https"
  Target target;       // default port from the scheme
  std::string path;  // path as sent, starting with '/'; "/" when empty (canonicalRequest judges it)
  std::string query;  // without '?'
};

/// Parses an absolute http/https URL. Userinfo, fragments and other schemes are refused.
std::expected<ParsedUrl, std::string> parseUrl(std::string_view url);

}  // namespace sluice::policy
