// Checkpoints kept off the box and the append-only check against them (`sluice audit checkpoint
// --json`, `sluice audit verify --consistent-with`): the current log extends a kept checkpoint
// when the Merkle root of its rows 1..position is the kept root. With the kept frontier (the
// roots of the tree's complete subtrees, left to right), a mismatch is narrowed to the first
// subtree whose rows differ: the chain makes every row after a rewritten one differ too, so
// the subtrees before it match and the first mismatching one holds the rewritten row.
#pragma once

#include <cstdint>
#include <expected>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "merkle.hpp"

namespace sluice::audit {
class PublicKey;
}

namespace sluice::audit::detail {

/// A checkpoint as `audit checkpoint --json` prints it (or a proof's "checkpoint" object).
struct KeptCheckpoint {
  std::int64_t seq = 0, position = 0, ts = 0;
  std::string root, key_id, signature;
  std::optional<MerkleFrontier> frontier;  // absent in a proof's checkpoint
};

/// Parses `json` and checks it was signed by `key` (and, when it carries a frontier, that the
/// frontier folds to the signed root); the error says what is wrong with it.
std::expected<KeptCheckpoint, std::string> parseKeptCheckpoint(std::string_view json,
                                                               const PublicKey& key);

/// Fed the verify walk's tree after every row; says whether the log extends the kept checkpoint.
class ConsistencyCheck {
 public:
  explicit ConsistencyCheck(KeptCheckpoint kept);
  /// After each row appended to `tree` (rows in seq order from 1).
  void observe(const MerkleFrontier& tree);
  /// "" when rows 1..position are the kept tree; else where history was rewritten or cut.
  std::string verdict(std::uint64_t rows) const;

 private:
  /// A complete subtree of the kept tree: leaves [begin, end) and their root.
  struct Subtree {
    std::uint64_t begin = 0, end = 0;
    Digest root{};
  };
  std::string name() const;

  KeptCheckpoint kept_;
  std::vector<Subtree> subtrees_;  // left to right; one (the whole tree) without a frontier
  std::size_t next_ = 0;
  std::uint64_t agreed_ = 0;        // rows 1..agreed_ are the kept tree's
  std::optional<Subtree> differs_;  // the first subtree whose rows differ
};

}  // namespace sluice::audit::detail
