// SHA-256, the one digest of the tree (policy texts, receipts, rows, artifacts, inputs).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace sluice::base {

using Sha256Digest = std::array<std::uint8_t, 32>;

/// The digests HMAC is computed with (request signing: SigV4, inject.hmac).
enum class HmacDigest : std::uint8_t { kSha256, kSha512 };

/// HMAC under `key` of the pieces of `message`, in order (one message, fed without a copy).
/// Raw bytes (32 or 64); empty only when OpenSSL fails.
std::string hmac(HmacDigest digest, std::string_view key,
                 std::span<const std::string_view> message);

Sha256Digest sha256(std::string_view data);
/// Lowercase hex of sha256(data).
std::string sha256Hex(std::string_view data);

/// Incremental SHA-256 for streams (files, bodies) in constant memory.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(Sha256&&) noexcept;
  Sha256& operator=(Sha256&&) noexcept;

  void update(std::string_view data);
  /// The digest of everything given; the object is then reset for a new stream.
  Sha256Digest finish();
  std::string finishHex();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace sluice::base
