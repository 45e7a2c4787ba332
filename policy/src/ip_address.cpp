// IP literal parsing in every spelling browsers and inet_aton accept, CIDR prefixes, and the
// address classification behind the SSRF guard.
#include "sluice/policy/ip_address.hpp"

#include <arpa/inet.h>

#include <cctype>
#include <charconv>
#include <cstring>

namespace sluice::policy {
namespace {

// One dotted part as inet_aton / the WHATWG URL parser read it: 0x.. hex, 0.. octal, else
// decimal. An empty "0x" is 0 (URL parser behaviour).
std::optional<std::uint64_t> parseV4Part(std::string_view part) {
  if (part.empty()) return std::nullopt;
  int base = 10;
  if (part.size() >= 2 && part[0] == '0' && (part[1] == 'x' || part[1] == 'X')) {
    base = 16;
    part.remove_prefix(2);
    if (part.empty()) return 0;
  } else if (part.size() >= 2 && part[0] == '0') {
    base = 8;
    part.remove_prefix(1);
  }
  if (part.size() > 20) return std::nullopt;
  std::uint64_t value = 0;
  auto [ptr, ec] = std::from_chars(part.data(), part.data() + part.size(), value, base);
  if (ec != std::errc() || ptr != part.data() + part.size()) return std::nullopt;
  return value;
}

std::optional<IpAddress> parseV4(std::string_view text) {
  if (!text.empty() && text.back() == '.') text.remove_suffix(1);  // URL parser allows one
  if (text.empty()) return std::nullopt;
  std::array<std::uint64_t, 4> parts{};  // at most four: no heap for a literal
  std::size_t count = 0;
  std::size_t start = 0;
  while (true) {
    std::size_t dot = text.find('.', start);
    std::string_view part = text.substr(start, dot == std::string_view::npos ? dot : dot - start);
    auto v = parseV4Part(part);
    if (!v || count == parts.size()) return std::nullopt;
    parts[count++] = *v;
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  // a.b.c.d; a.b.c (c is 16 bits); a.b (b is 24 bits); a (32 bits).
  std::uint64_t result = 0;
  for (std::size_t i = 0; i + 1 < count; ++i) {
    if (parts[i] > 255) return std::nullopt;
    result |= parts[i] << (8 * (3 - i));
  }
  int last_bits = 8 * static_cast<int>(5 - count);
  if (parts[count - 1] >= (1ull << last_bits)) return std::nullopt;
  result |= parts[count - 1];
  return IpAddress::v4(static_cast<std::uint32_t>(result));
}

std::optional<IpAddress> parseV6(std::string_view text) {
  if (text.size() >= 64 || text.find('%') != std::string_view::npos) return std::nullopt;
  char buf[64];
  std::memcpy(buf, text.data(), text.size());
  buf[text.size()] = '\0';
  std::array<std::uint8_t, 16> bytes{};
  if (inet_pton(AF_INET6, buf, bytes.data()) != 1) return std::nullopt;
  return IpAddress::v6(bytes);
}

bool inV4(std::uint32_t a, std::uint32_t net, int prefix) {
  std::uint32_t mask = prefix == 0 ? 0 : ~std::uint32_t{0} << (32 - prefix);
  return (a & mask) == (net & mask);
}

bool hasPrefix(const std::array<std::uint8_t, 16>& b, std::initializer_list<std::uint8_t> bytes,
               int prefix_bits) {
  std::array<std::uint8_t, 16> net{};
  std::size_t i = 0;
  for (auto x : bytes) net[i++] = x;
  for (int bit = 0; bit < prefix_bits; ++bit) {
    int byte = bit / 8, shift = 7 - bit % 8;
    if (((b[byte] >> shift) & 1) != ((net[byte] >> shift) & 1)) return false;
  }
  return true;
}

IpAddress masked(const IpAddress& a, int len) {
  auto b = a.bytes();
  int total = a.isV4() ? 4 : 16;
  for (int i = 0; i < total; ++i, len -= 8) {
    std::uint8_t m = len >= 8 ? 0xFF : len <= 0 ? 0 : static_cast<std::uint8_t>(0xFF << (8 - len));
    b[i] &= m;
  }
  if (!a.isV4()) return IpAddress::v6(b);
  return IpAddress::v4((std::uint32_t{b[0]} << 24) | (std::uint32_t{b[1]} << 16) |
                       (std::uint32_t{b[2]} << 8) | b[3]);
}

AddressClass classifyV4(std::uint32_t a) {
  if (a == 0xFFFFFFFFu) return AddressClass::kBroadcast;
  if (inV4(a, 0x00000000, 8)) return AddressClass::kUnspecified;
  if (inV4(a, 0x7F000000, 8)) return AddressClass::kLoopback;
  if (inV4(a, 0x0A000000, 8) || inV4(a, 0xAC100000, 12) || inV4(a, 0xC0A80000, 16)) {
    return AddressClass::kPrivate;
  }
  if (inV4(a, 0x64400000, 10)) return AddressClass::kSharedCgnat;
  if (inV4(a, 0xA9FE0000, 16)) return AddressClass::kLinkLocal;
  if (inV4(a, 0xE0000000, 4)) return AddressClass::kMulticast;
  if (inV4(a, 0xF0000000, 4) ||   // reserved (future use)
      inV4(a, 0xC0000000, 24) ||  // IETF protocol assignments
      inV4(a, 0xC0000200, 24) ||  // TEST-NET-1
      inV4(a, 0xC6336400, 24) ||  // TEST-NET-2
      inV4(a, 0xCB007100, 24) ||  // TEST-NET-3
      inV4(a, 0xC6120000, 15) ||  // benchmarking
      inV4(a, 0xC0586300, 24)) {  // 6to4 relay anycast (deprecated)
    return AddressClass::kReserved;
  }
  return AddressClass::kGlobal;
}

}  // namespace

IpAddress IpAddress::v4(std::uint32_t host_order) {
  IpAddress a;
  a.family_ = Family::kV4;
  a.bytes_[0] = static_cast<std::uint8_t>(host_order >> 24);
  a.bytes_[1] = static_cast<std::uint8_t>(host_order >> 16);
  a.bytes_[2] = static_cast<std::uint8_t>(host_order >> 8);
  a.bytes_[3] = static_cast<std::uint8_t>(host_order);
  return a;
}

IpAddress IpAddress::v6(const std::array<std::uint8_t, 16>& bytes) {
  IpAddress a;
  a.family_ = Family::kV6;
  a.bytes_ = bytes;
  return a;
}

std::uint32_t IpAddress::v4HostOrder() const {
  return (std::uint32_t{bytes_[0]} << 24) | (std::uint32_t{bytes_[1]} << 16) |
         (std::uint32_t{bytes_[2]} << 8) | std::uint32_t{bytes_[3]};
}

std::string IpAddress::str() const {
  char buf[INET6_ADDRSTRLEN];
  if (isV4()) {
    // Dotted quad by hand: glibc's inet_ntop formats IPv4 with sprintf, and a plain-HTTP
    // request's target and decision each spell one address.
    char* end = buf;
    for (int i = 0; i < 4; ++i) {
      if (i) *end++ = '.';
      end = std::to_chars(end, buf + sizeof buf, bytes_[i]).ptr;
    }
    return std::string(buf, end);
  }
  inet_ntop(AF_INET6, bytes_.data(), buf, sizeof buf);
  return buf;
}

std::optional<IpAddress> IpAddress::embeddedV4() const {
  if (isV4()) return std::nullopt;
  const auto& b = bytes_;
  auto from = [&](int offset, bool invert) {
    std::uint32_t v = (std::uint32_t{b[offset]} << 24) | (std::uint32_t{b[offset + 1]} << 16) |
                      (std::uint32_t{b[offset + 2]} << 8) | std::uint32_t{b[offset + 3]};
    return IpAddress::v4(invert ? ~v : v);
  };
  if (hasPrefix(b, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF}, 96)) return from(12, false);
  if (hasPrefix(b, {}, 96)) return from(12, false);  // IPv4-compatible (deprecated)
  if (hasPrefix(b, {0x00, 0x64, 0xFF, 0x9B}, 96)) return from(12, false);  // NAT64 well-known
  if (hasPrefix(b, {0x00, 0x64, 0xFF, 0x9B, 0x00, 0x01}, 48)) return from(12, false);
  if (hasPrefix(b, {0x20, 0x02}, 16)) return from(2, false);              // 6to4
  if (hasPrefix(b, {0x20, 0x01, 0x00, 0x00}, 32)) return from(12, true);  // Teredo client
  // SIIT-style ::ffff:0:a.b.c.d (RFC 2765 "IPv4-translated")
  if (hasPrefix(b, {0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0, 0}, 96)) return from(12, false);
  return std::nullopt;
}

std::optional<IpAddress> parseIpLiteral(std::string_view text) {
  if (text.size() >= 2 && text.front() == '[' && text.back() == ']') {
    return parseV6(text.substr(1, text.size() - 2));
  }
  if (text.find(':') != std::string_view::npos) return parseV6(text);
  return parseV4(text);
}

bool Cidr::contains(const IpAddress& addr) const {
  const IpAddress* a = &addr;
  std::optional<IpAddress> mapped;
  if (network.isV4() && !addr.isV4()) {
    // An IPv4-mapped destination is the IPv4 address for every purpose that matters here.
    const auto& b = addr.bytes();
    if (!hasPrefix(b, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF}, 96)) return false;
    mapped = addr.embeddedV4();
    a = &*mapped;
  } else if (network.family() != addr.family()) {
    return false;
  }
  int bits = prefix;
  const auto& x = a->bytes();
  const auto& n = network.bytes();
  for (int i = 0; bits > 0; ++i, bits -= 8) {
    std::uint8_t mask = bits >= 8 ? 0xFF : static_cast<std::uint8_t>(0xFF << (8 - bits));
    if ((x[i] & mask) != (n[i] & mask)) return false;
  }
  return true;
}

std::string Cidr::str() const { return network.str() + "/" + std::to_string(prefix); }

std::expected<Cidr, std::string> parseCidr(std::string_view text) {
  std::string_view addr_text = text;
  std::optional<int> prefix;
  if (auto slash = text.find('/'); slash != std::string_view::npos) {
    addr_text = text.substr(0, slash);
    std::string_view len = text.substr(slash + 1);
    int v = -1;
    auto [ptr, ec] = std::from_chars(len.data(), len.data() + len.size(), v);
    if (len.empty() || ec != std::errc() || ptr != len.data() + len.size() || v < 0) {
      return std::unexpected("bad CIDR '" + std::string(text) + "': prefix length is not a number");
    }
    prefix = v;
  }
  // CIDRs must be written plainly: dotted quad or RFC 4291 IPv6, not the exotic spellings.
  std::optional<IpAddress> addr;
  char buf[64];
  if (addr_text.size() < sizeof buf) {
    std::memcpy(buf, addr_text.data(), addr_text.size());
    buf[addr_text.size()] = '\0';
    std::array<std::uint8_t, 16> bytes{};
    if (inet_pton(AF_INET, buf, bytes.data()) == 1) {
      addr = IpAddress::v4((std::uint32_t{bytes[0]} << 24) | (std::uint32_t{bytes[1]} << 16) |
                           (std::uint32_t{bytes[2]} << 8) | bytes[3]);
    } else if (inet_pton(AF_INET6, buf, bytes.data()) == 1) {
      addr = IpAddress::v6(bytes);
    }
  }
  if (!addr) {
    return std::unexpected("bad CIDR '" + std::string(text) +
                           "': not an IPv4 or IPv6 address (write e.g. 10.0.0.0/8 or fd00::/8)");
  }
  int max = addr->isV4() ? 32 : 128;
  int len = prefix.value_or(max);
  if (len > max) {
    return std::unexpected("bad CIDR '" + std::string(text) + "': prefix length " +
                           std::to_string(len) + " is more than " + std::to_string(max));
  }
  // Refuse set host bits: "10.1.2.3/8" is almost always a typo for a narrower range.
  IpAddress network = masked(*addr, len);
  if (!(network == *addr)) {
    return std::unexpected("bad CIDR '" + std::string(text) +
                           "': host bits are set (did you mean " + network.str() + "/" +
                           std::to_string(len) + "?)");
  }
  Cidr c{network, len};
  return c;
}

AddressClass classifyAddress(const IpAddress& addr) {
  if (addr.isV4()) return classifyV4(addr.v4HostOrder());
  const auto& b = addr.bytes();
  static constexpr std::array<std::uint8_t, 16> kZero{};
  std::array<std::uint8_t, 16> one{};
  one[15] = 1;
  if (b == kZero) return AddressClass::kUnspecified;
  if (b == one) return AddressClass::kLoopback;
  if (auto v4 = addr.embeddedV4()) {
    AddressClass inner = classifyV4(v4->v4HostOrder());
    if (inner != AddressClass::kGlobal) return inner;
    // Mapped and NAT64 forms of a global address reach that address; the deprecated
    // compatible form and the local-use NAT64 prefix do not route on the internet.
    if (hasPrefix(b, {}, 96) || hasPrefix(b, {0x00, 0x64, 0xFF, 0x9B, 0x00, 0x01}, 48)) {
      return AddressClass::kReserved;
    }
    return AddressClass::kGlobal;
  }
  if (hasPrefix(b, {0xFE, 0x80}, 10)) return AddressClass::kLinkLocal;
  if (hasPrefix(b, {0xFC}, 7)) return AddressClass::kUniqueLocal;
  if (hasPrefix(b, {0xFF}, 8)) return AddressClass::kMulticast;
  if (hasPrefix(b, {0xFE, 0xC0}, 10)) return AddressClass::kReserved;  // site-local (deprecated)
  if (hasPrefix(b, {0x20, 0x01, 0x0D, 0xB8}, 32)) return AddressClass::kReserved;        // docs
  if (hasPrefix(b, {0x01, 0x00, 0, 0, 0, 0, 0, 0}, 64)) return AddressClass::kReserved;  // discard
  if (hasPrefix(b, {0x20, 0x01, 0x00, 0x10}, 28) || hasPrefix(b, {0x20, 0x01, 0x00, 0x20}, 28) ||
      hasPrefix(b, {0x20, 0x01, 0x00, 0x02, 0x00, 0x00}, 48)) {
    return AddressClass::kReserved;  // ORCHID, ORCHIDv2, benchmarking
  }
  if (!hasPrefix(b, {0x20}, 3)) return AddressClass::kReserved;  // outside global unicast
  return AddressClass::kGlobal;
}

std::string_view addressClassName(AddressClass c) {
  switch (c) {
    case AddressClass::kGlobal:
      return "global";
    case AddressClass::kLoopback:
      return "loopback";
    case AddressClass::kPrivate:
      return "private";
    case AddressClass::kSharedCgnat:
      return "shared (CGNAT)";
    case AddressClass::kLinkLocal:
      return "link-local";
    case AddressClass::kUniqueLocal:
      return "unique-local";
    case AddressClass::kMulticast:
      return "multicast";
    case AddressClass::kUnspecified:
      return "unspecified";
    case AddressClass::kBroadcast:
      return "broadcast";
    case AddressClass::kReserved:
      return "reserved";
  }
  return "unknown";
}

}  // namespace sluice::policy
