// The one lowercase hex encoder and decoder (Envoy's common/hex.h idea).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::base {

/// Lowercase hex of `bytes`, two digits per byte.
std::string hexEncode(std::span<const std::uint8_t> bytes);
std::string hexEncode(std::string_view bytes);

/// The bytes of an even-length hex string (either case); nullopt on any other character.
std::optional<std::vector<std::uint8_t>> hexDecode(std::string_view hex);

/// Appends the two lowercase hex digits of `byte` to `out` (for escapers that build strings).
void appendHexByte(std::string& out, std::uint8_t byte);

}  // namespace sluice::base
