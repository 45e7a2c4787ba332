// SyntheticNames (sluice/proxy/synthetic_names.hpp).
#include "sluice/proxy/synthetic_names.hpp"

namespace sluice::proxy {
namespace {
constexpr std::uint32_t kV4Base = (198u << 24) | (18u << 16);  // 198.18.0.0/15
// 64:ff9b:1::/48, index in the last 32 bits.
constexpr std::array<std::uint8_t, 6> kV6Prefix = {0x00, 0x64, 0xff, 0x9b, 0x00, 0x01};
}  // namespace

std::optional<std::uint32_t> SyntheticNames::indexFor(const std::string& name) {
  std::lock_guard lock(mu_);
  if (auto it = index_.find(name); it != index_.end()) return it->second;
  // Index 0 (198.18.0.0) is a network address: start at 1.
  const auto next = static_cast<std::uint32_t>(index_.size()) + 1;
  if (next >= kCapacity) return std::nullopt;
  index_.emplace(name, next);
  names_.emplace(next, name);
  return next;
}

std::optional<policy::IpAddress> SyntheticNames::v4For(const std::string& name) {
  auto i = indexFor(name);
  if (!i) return std::nullopt;
  return policy::IpAddress::v4(kV4Base + *i);
}

std::optional<policy::IpAddress> SyntheticNames::v6For(const std::string& name) {
  auto i = indexFor(name);
  if (!i) return std::nullopt;
  std::array<std::uint8_t, 16> b{};
  for (std::size_t k = 0; k < kV6Prefix.size(); ++k) b[k] = kV6Prefix[k];
  b[12] = static_cast<std::uint8_t>(*i >> 24);
  b[13] = static_cast<std::uint8_t>(*i >> 16);
  b[14] = static_cast<std::uint8_t>(*i >> 8);
  b[15] = static_cast<std::uint8_t>(*i);
  return policy::IpAddress::v6(b);
}

bool SyntheticNames::isSynthetic(const policy::IpAddress& a) {
  if (a.isV4()) return (a.v4HostOrder() & 0xfffe0000u) == kV4Base;
  const auto& b = a.bytes();
  for (std::size_t k = 0; k < kV6Prefix.size(); ++k)
    if (b[k] != kV6Prefix[k]) return false;
  return true;
}

std::optional<std::string> SyntheticNames::nameOf(const policy::IpAddress& a) const {
  if (!isSynthetic(a)) return std::nullopt;
  std::uint32_t i = 0;
  if (a.isV4()) {
    i = a.v4HostOrder() - kV4Base;
  } else {
    const auto& b = a.bytes();
    i = (std::uint32_t{b[12]} << 24) | (std::uint32_t{b[13]} << 16) | (std::uint32_t{b[14]} << 8) |
        b[15];
  }
  std::lock_guard lock(mu_);
  auto it = names_.find(i);
  if (it == names_.end()) return std::nullopt;
  return it->second;
}

std::size_t SyntheticNames::size() const {
  std::lock_guard lock(mu_);
  return index_.size();
}

}  // namespace sluice::proxy
