// The Merkle tree of signed checkpoints (RFC 9162 section 2.1 hashing): leaves are the chain's
// row hashes in seq order, leaf = SHA-256(0x00 || 32-byte row hash), node = SHA-256(0x01 || left
// || right). MerkleFrontier keeps the tree's right edge (one subtree root per set bit of the
// size: O(log n) memory) so the writer and verify extend it row by row; inclusion proofs are
// built from the full list of leaves and checked without it.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::audit::detail {

using Digest = std::array<unsigned char, 32>;

/// 64 lowercase hex characters of a digest, and back (nullopt unless exactly that).
std::string toHex(const Digest& d);
std::optional<Digest> fromHex(std::string_view hex);

Digest leafHash(const Digest& row_hash);
Digest nodeHash(const Digest& left, const Digest& right);
/// The root of the empty tree: SHA-256 of nothing.
Digest emptyRoot();

class MerkleFrontier {
 public:
  /// Appends the leaf of one row (its chain hash).
  void append(const Digest& row_hash);
  std::uint64_t size() const { return size_; }
  Digest root() const;
  /// The subtree roots as concatenated hex, largest subtree first (checkpoints.frontier).
  std::string serialize() const;
  /// A frontier of `size` leaves from serialize()'s text; nullopt if it does not fit the size.
  static std::optional<MerkleFrontier> parse(std::uint64_t size, std::string_view text);

 private:
  std::vector<Digest> nodes_;  // one per set bit of size_, largest subtree first
  std::uint64_t size_ = 0;
};

/// The root over `leaves` (already leaf-hashed).
Digest subtreeRoot(std::span<const Digest> leaves);
/// The audit path of leaf `index` in the tree over `leaves` (RFC 9162 2.1.3.1).
std::vector<Digest> inclusionPath(std::span<const Digest> leaves, std::uint64_t index);
/// Recomputes the root from a leaf and its audit path (RFC 9162 2.1.3.2); nullopt when the
/// path's length does not fit (index, size).
std::optional<Digest> rootFromPath(std::uint64_t index, std::uint64_t size, const Digest& leaf,
                                   std::span<const Digest> path);

}  // namespace sluice::audit::detail
