// The names sluice's DNS handed out to one execution (DESIGN.md "Transparent capture and DNS"):
// each name an allow or ask rule could match gets a synthetic address — IPv4 from 198.18.0.0/15
// (RFC 2544 benchmarking space, never routed), IPv6 from 64:ff9b:1::/48 — and a connection to
// that address is then decided by the name, not by the address. One map per execution, shared
// by its DNS server (which writes) and its proxy listeners (which read).
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "sluice/policy/ip_address.hpp"

namespace sluice::proxy {

class SyntheticNames {
 public:
  /// At most this many names per execution (the rest get no address: the DNS answers SERVFAIL).
  static constexpr std::uint32_t kCapacity = 1u << 17;  // all of 198.18.0.0/15

  /// The IPv4 address for `name` (lower-case, no trailing dot): the same on every call.
  std::optional<policy::IpAddress> v4For(const std::string& name);
  /// The IPv6 address for `name`: 64:ff9b:1::<same index as v4For>.
  std::optional<policy::IpAddress> v6For(const std::string& name);
  /// The name behind `address`, if this map handed it out.
  std::optional<std::string> nameOf(const policy::IpAddress& address) const;
  /// True when `address` lies in the synthetic ranges (handed out or not).
  static bool isSynthetic(const policy::IpAddress& address);
  std::size_t size() const;

 private:
  std::optional<std::uint32_t> indexFor(const std::string& name);

  mutable std::mutex mu_;
  std::unordered_map<std::string, std::uint32_t> index_;  // name -> index
  std::unordered_map<std::uint32_t, std::string> names_;  // index -> name
};

}  // namespace sluice::proxy
