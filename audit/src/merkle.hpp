// The Merkle tree of signed checkpoints (RFC 9162 section 2.1 hashing): leaves are the chain's
// row hashes in seq order, leaf = SHA-256(0x00 || 32-byte row hash), node = SHA-256(0x01 || left
// || right). MerkleFrontier keeps the tree's right edge (one subtree root per set bit of the
// size: O(log n) memory) so the writer and verify extend it row by row; InclusionPathBuilder
// builds an inclusion proof from one pass over the leaves in the same O(log n) memory, and
// rootFromPath checks it without them.
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
  /// Appends a leaf already hashed with leafHash (InclusionPathBuilder folds ranges of them).
  void appendLeaf(const Digest& leaf);
  std::uint64_t size() const { return size_; }
  Digest root() const;
  /// The subtree roots, largest (leftmost) first: for a tree grown to a prefix size of a larger
  /// one, these are the larger tree's first subtrees (`audit verify --consistent-with`).
  const std::vector<Digest>& nodes() const { return nodes_; }
  /// The subtree roots as concatenated hex, largest subtree first (checkpoints.frontier).
  std::string serialize() const;
  /// A frontier of `size` leaves from serialize()'s text; nullopt if it does not fit the size.
  static std::optional<MerkleFrontier> parse(std::uint64_t size, std::string_view text);

 private:
  std::vector<Digest> nodes_;  // one per set bit of size_, largest subtree first
  std::uint64_t size_ = 0;
};

/// The root over `leaves` (already leaf-hashed). In memory: the reference the streaming
/// InclusionPathBuilder is tested against.
Digest subtreeRoot(std::span<const Digest> leaves);
/// The audit path of leaf `index` in the tree over `leaves` (RFC 9162 2.1.3.1). In memory, like
/// subtreeRoot.
std::vector<Digest> inclusionPath(std::span<const Digest> leaves, std::uint64_t index);

/// Leaves [begin, end) of a tree.
struct LeafRange {
  std::uint64_t begin = 0, end = 0;
  friend bool operator==(const LeafRange&, const LeafRange&) = default;
};
/// The ranges whose roots make up the audit path of leaf `index` in a tree of `size` leaves, in
/// the path's order (from the leaf up): the siblings along the way from the leaf to the root,
/// found from the two numbers alone (RFC 9162 2.1.3.1). Together with the leaf they partition
/// [0, size). Empty unless index < size.
std::vector<LeafRange> inclusionPathRanges(std::uint64_t index, std::uint64_t size);

/// The audit path of leaf `index` and the root of a tree of `size` leaves, from the leaves fed
/// one at a time in order (`sluice audit prove` streams them from the database): memory is
/// O(log size) however many leaves pass through, where inclusionPath needs all of them at once.
class InclusionPathBuilder {
 public:
  InclusionPathBuilder(std::uint64_t index, std::uint64_t size);
  /// Feeds the next leaf (already leaf-hashed); leaves past `size` are ignored.
  void append(const Digest& leaf);
  /// How many leaves were fed (at most `size`).
  std::uint64_t count() const { return count_; }
  /// Once count() == size: the audit path, equal to inclusionPath() over the same leaves.
  const std::vector<Digest>& path() const { return path_; }
  /// Once count() == size: the tree's root, equal to subtreeRoot() over the same leaves
  /// (recomputed from the leaf and its path, so a wrong path cannot give the right root).
  Digest root() const;

 private:
  struct Slot {
    LeafRange range;
    std::size_t position;  // in path_
  };
  std::uint64_t index_, size_, count_ = 0;
  std::vector<Slot> slots_;  // the path's ranges by leaf order
  std::size_t next_ = 0;     // the slot the next leaf can fall into
  MerkleFrontier range_;     // the current range's leaves so far
  Digest leaf_{};            // leaf `index`
  std::vector<Digest> path_;
};

/// Recomputes the root from a leaf and its audit path (RFC 9162 2.1.3.2); nullopt when the
/// path's length does not fit (index, size).
std::optional<Digest> rootFromPath(std::uint64_t index, std::uint64_t size, const Digest& leaf,
                                   std::span<const Digest> path);

}  // namespace sluice::audit::detail
