// SHA-256, the one digest of the tree (policy texts, receipts, rows, artifacts, inputs).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace sluice::base {

using Sha256Digest = std::array<std::uint8_t, 32>;

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
