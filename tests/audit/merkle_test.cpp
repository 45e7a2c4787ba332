// The RFC 9162 Merkle tree of checkpoints: the incremental frontier agrees with a direct
// recursive definition for every size, inclusion paths verify for every leaf and fail when any
// part of them is changed, and the frontier survives serialisation.
#include "merkle.hpp"

#include <gtest/gtest.h>
#include <openssl/sha.h>

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

}  // namespace
}  // namespace sluice::audit::detail
