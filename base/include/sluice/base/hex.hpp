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

/// Writes the 2 * bytes.size() lowercase hex digits of `bytes` to `out` (no allocation: for
/// hot paths that fill a fixed buffer, like the audit row hash).
void hexEncodeInto(std::span<const std::uint8_t> bytes, char* out);

/// Appends the two lowercase hex digits of `byte` to `out` (for escapers that build strings).
void appendHexByte(std::string& out, std::uint8_t byte);

}  // namespace sluice::base
