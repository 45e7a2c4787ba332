// The RFC 9162 Merkle tree of checkpoints: the incremental frontier agrees with a direct
// recursive definition for every size, inclusion paths verify for every leaf and fail when any
// part of them is changed, the frontier survives serialisation, and the streaming
// InclusionPathBuilder (what `sluice audit prove` uses) gives the in-memory path and root.
#include "merkle.hpp"

#include <gtest/gtest.h>
#include <openssl/sha.h>

#include <algorithm>
#include <bit>
#include <random>
#include <vector>

namespace sluice::audit::detail {
namespace {

Digest rowHash(int i) {
  Digest d{};
  std::string s = "row " + std::to_string(i);
  SHA256(reinterpret_cast<const unsigned char*>(s.data()), s.size(), d.data());
  return d;
}

/// RFC 9162 2.1.1 MTH, straight from the definition, on raw leaf data.
Digest referenceRoot(const std::vector<Digest>& rows, std::size_t lo, std::size_t hi) {
  std::size_t n = hi - lo;
  if (n == 0) return emptyRoot();
  if (n == 1) {
    unsigned char buf[33] = {0};
    std::copy(rows[lo].begin(), rows[lo].end(), buf + 1);
    Digest d;
    SHA256(buf, sizeof buf, d.data());
    return d;
  }
  std::size_t k = 1;
  while (k * 2 < n) k *= 2;
  Digest l = referenceRoot(rows, lo, lo + k), r = referenceRoot(rows, lo + k, hi);
  unsigned char buf[65] = {1};
  std::copy(l.begin(), l.end(), buf + 1);
  std::copy(r.begin(), r.end(), buf + 33);
  Digest d;
  SHA256(buf, sizeof buf, d.data());
  return d;
}

TEST(MerkleTest, FrontierRootMatchesTheDefinitionForEverySize) {
  std::vector<Digest> rows;
  MerkleFrontier f;
  EXPECT_EQ(f.root(), emptyRoot());
  for (int n = 1; n <= 70; ++n) {
    rows.push_back(rowHash(n));
    f.append(rows.back());
    ASSERT_EQ(toHex(f.root()), toHex(referenceRoot(rows, 0, rows.size()))) << n;
    auto back = MerkleFrontier::parse(f.size(), f.serialize());
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(back->root(), f.root());
  }
  EXPECT_FALSE(MerkleFrontier::parse(70, f.serialize() + std::string(64, '0')).has_value());
  EXPECT_FALSE(MerkleFrontier::parse(71, f.serialize()).has_value());
}

TEST(MerkleTest, InclusionPathsVerifyAndTamperingFails) {
  for (std::size_t n : {1u, 2u, 3u, 5u, 8u, 13u, 33u}) {
    std::vector<Digest> leaves;
    std::vector<Digest> rows;
    for (std::size_t i = 0; i < n; ++i) {
      rows.push_back(rowHash(static_cast<int>(i)));
      leaves.push_back(leafHash(rows.back()));
    }
    const Digest root = subtreeRoot(leaves);
    ASSERT_EQ(root, referenceRoot(rows, 0, n));
    for (std::size_t i = 0; i < n; ++i) {
      auto path = inclusionPath(leaves, i);
      auto r = rootFromPath(i, n, leaves[i], path);
      ASSERT_TRUE(r.has_value()) << n << " " << i;
      EXPECT_EQ(*r, root) << n << " " << i;
      // Another leaf, another index, a changed sibling, a shorter path: no longer the root.
      Digest other = leafHash(rowHash(1000));
      EXPECT_NE(rootFromPath(i, n, other, path).value_or(Digest{}), root);
      if (n > 1) {
        EXPECT_NE(rootFromPath((i + 1) % n, n, leaves[i], path).value_or(Digest{}), root);
        auto bad = path;
        bad[0][0] ^= 1;
        EXPECT_NE(rootFromPath(i, n, leaves[i], bad).value_or(Digest{}), root);
        bad = path;
        bad.pop_back();
        EXPECT_NE(rootFromPath(i, n, leaves[i], bad).value_or(Digest{}), root);
      }
    }
    EXPECT_FALSE(rootFromPath(n, n, leaves[0], inclusionPath(leaves, 0)).has_value());
  }
}

std::vector<Digest> randomLeaves(std::mt19937_64& rng, std::size_t n) {
  std::vector<Digest> leaves(n);
  for (auto& d : leaves)
    for (auto& b : d) b = static_cast<unsigned char>(rng());
  return leaves;
}

/// The builder fed `leaves` in order, as prove streams them.
InclusionPathBuilder streamed(const std::vector<Digest>& leaves, std::uint64_t index) {
  InclusionPathBuilder b(index, leaves.size());
  for (const Digest& d : leaves) b.append(d);
  return b;
}

TEST(MerkleTest, PathRangesAreTheSiblingsAndPartitionTheTree) {
  // The tree of 7: leaf 4's siblings from the leaf up are leaf 5, leaf 6, then leaves 0..3.
  EXPECT_EQ(inclusionPathRanges(4, 7), (std::vector<LeafRange>{{5, 6}, {6, 7}, {0, 4}}));
  EXPECT_EQ(inclusionPathRanges(6, 7), (std::vector<LeafRange>{{4, 6}, {0, 4}}));
  EXPECT_TRUE(inclusionPathRanges(0, 1).empty());
  EXPECT_TRUE(inclusionPathRanges(3, 3).empty());
  for (std::uint64_t n = 1; n <= 300; ++n) {
    for (std::uint64_t m = 0; m < n; ++m) {
      std::vector<int> covered(n, 0);
      covered[m] = 1;
      for (const LeafRange& r : inclusionPathRanges(m, n)) {
        ASSERT_LT(r.begin, r.end);
        ASSERT_LE(r.end, n);
        for (std::uint64_t i = r.begin; i < r.end; ++i) ++covered[i];
      }
      ASSERT_EQ(std::count(covered.begin(), covered.end(), 1), static_cast<long>(n)) << n << m;
    }
  }
}

TEST(MerkleTest, StreamedPathAndRootEqualTheInMemoryOnesForEveryLeafUpTo300) {
  std::mt19937_64 rng(9162);
  for (std::size_t n = 1; n <= 300; ++n) {
    const std::vector<Digest> leaves = randomLeaves(rng, n);
    const Digest root = subtreeRoot(leaves);
    for (std::uint64_t m = 0; m < n; ++m) {
      InclusionPathBuilder b = streamed(leaves, m);
      ASSERT_EQ(b.count(), n);
      ASSERT_EQ(b.path(), inclusionPath(leaves, m)) << "n " << n << " m " << m;
      ASSERT_EQ(b.root(), root) << "n " << n << " m " << m;
    }
  }
}

TEST(MerkleTest, StreamedPathAndRootEqualTheInMemoryOnesForLargeTrees) {
  std::mt19937_64 rng(20260);
  for (std::size_t n : {65'536u, 65'537u, 100'000u, 131'071u}) {
    const std::vector<Digest> leaves = randomLeaves(rng, n);
    const Digest root = subtreeRoot(leaves);
    std::vector<std::uint64_t> indexes = {0, n / 2, n - 2, n - 1};
    for (int i = 0; i < 3; ++i) indexes.push_back(rng() % n);
    for (std::uint64_t m : indexes) {
      InclusionPathBuilder b = streamed(leaves, m);
      EXPECT_EQ(b.path(), inclusionPath(leaves, m)) << "n " << n << " m " << m;
      EXPECT_EQ(b.root(), root) << "n " << n << " m " << m;
      EXPECT_LE(b.path().size(), static_cast<std::size_t>(std::bit_width(n - 1)));
    }
  }
}

TEST(MerkleTest, StreamedRootChangesWithAnyLeaf) {
  std::mt19937_64 rng(7);
  std::vector<Digest> leaves = randomLeaves(rng, 37);
  const Digest root = subtreeRoot(leaves);
  for (std::size_t changed : {0u, 11u, 36u}) {
    std::vector<Digest> other = leaves;
    other[changed][5] ^= 1;
    EXPECT_NE(streamed(other, 11).root(), root) << changed;
  }
}

}  // namespace
}  // namespace sluice::audit::detail
