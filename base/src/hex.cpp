// Hex encoding: one digit table for the whole tree.
#include "sluice/base/hex.hpp"

namespace sluice::base {
namespace {

constexpr char kDigits[] = "0123456789abcdef";

int digitValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

void appendHexByte(std::string& out, std::uint8_t byte) {
  out.push_back(kDigits[byte >> 4]);
  out.push_back(kDigits[byte & 0x0f]);
}

void hexEncodeInto(std::span<const std::uint8_t> bytes, char* out) {
  for (std::uint8_t b : bytes) {
    *out++ = kDigits[b >> 4];
    *out++ = kDigits[b & 0x0f];
  }
}

std::string hexEncode(std::span<const std::uint8_t> bytes) {
  std::string out(bytes.size() * 2, '\0');
  hexEncodeInto(bytes, out.data());
  return out;
}

std::string hexEncode(std::string_view bytes) {
  return hexEncode(std::span(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()));
}

std::optional<std::vector<std::uint8_t>> hexDecode(std::string_view hex) {
  if (hex.size() % 2 != 0) return std::nullopt;
  std::vector<std::uint8_t> out(hex.size() / 2);
  for (std::size_t i = 0; i < out.size(); ++i) {
    int hi = digitValue(hex[2 * i]);
    int lo = digitValue(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out[i] = static_cast<std::uint8_t>(hi << 4 | lo);
  }
  return out;
}

}  // namespace sluice::base
