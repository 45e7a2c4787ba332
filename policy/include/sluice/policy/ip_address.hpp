// IP addresses: parsing literals in every spelling, CIDRs, and the SSRF classification
// the proxy applies to every resolved address (kept here so `policy explain --ip` and the
// proxy share one implementation).
#pragma once

#include <array>
#include <cstdint>
#include <expected>
#include <optional>
#include <string>
#include <string_view>

namespace sluice::policy {

/// An IPv4 or IPv6 address in network byte order. IPv4 uses the first 4 bytes.
class IpAddress {
 public:
  enum class Family : std::uint8_t { kV4, kV6 };

  IpAddress() = default;
  static IpAddress v4(std::uint32_t host_order);
  static IpAddress v6(const std::array<std::uint8_t, 16>& bytes);

  Family family() const { return family_; }
  bool isV4() const { return family_ == Family::kV4; }
  const std::array<std::uint8_t, 16>& bytes() const { return bytes_; }
  std::uint32_t v4HostOrder() const;

  /// Canonical text: dotted quad, or RFC 5952 IPv6 (no brackets).
  std::string str() const;

  /// If this is an IPv6 address that embeds an IPv4 one (mapped ::ffff:0:0/96, compatible
  /// ::/96, NAT64 64:ff9b::/96 and 64:ff9b:1::/48, 6to4 2002::/16, Teredo 2001::/32
  /// client), the embedded IPv4 address.
  std::optional<IpAddress> embeddedV4() const;

  friend bool operator==(const IpAddress&, const IpAddress&) = default;

 private:
  Family family_ = Family::kV4;
  std::array<std::uint8_t, 16> bytes_{};
};

/// Parses an IP literal as a URL host or `inet_aton` would accept it: `127.0.0.1`,
/// `2130706433`, `0x7f.1`, `0177.0.0.1`, `127.1`, `[::1]`, `::ffff:127.0.0.1`,
/// `[::ffff:7f00:1]`. Returns nullopt for anything that is not an IP literal.
std::optional<IpAddress> parseIpLiteral(std::string_view text);

/// An address prefix such as `10.20.0.0/16` or `fd00::/8`.
struct Cidr {
  IpAddress network;  // host bits cleared
  int prefix = 0;

  bool contains(const IpAddress& addr) const;
  std::string str() const;
};

/// Parses `ADDR/LEN` (a bare address means /32 or /128). Host bits set is an error.
std::expected<Cidr, std::string> parseCidr(std::string_view text);

/// What kind of address this is, for the SSRF guard.
enum class AddressClass : std::uint8_t {
  kGlobal,
  kLoopback,     // 127/8, ::1
  kPrivate,      // RFC 1918
  kSharedCgnat,  // 100.64/10
  kLinkLocal,    // 169.254/16 (incl. 169.254.169.254 metadata), fe80::/10
  kUniqueLocal,  // fc00::/7
  kMulticast,    // 224/4, ff00::/8
  kUnspecified,  // 0/8, ::
  kBroadcast,    // 255.255.255.255
  kReserved,     // 240/4, 192.0.0/24, benchmarking, documentation, site-local, ...
};

/// Classifies an address; IPv6 forms that embed IPv4 are classified by the embedded address
/// when that is not global (so ::ffff:127.0.0.1 is loopback).
AddressClass classifyAddress(const IpAddress& addr);

/// Stable lower-case name: "global", "loopback", "private", ...
std::string_view addressClassName(AddressClass c);

}  // namespace sluice::policy
