// RFC 9162 Merkle tree hashing, the frontier and inclusion proofs; see merkle.hpp.
#define OPENSSL_SUPPRESS_DEPRECATED  // SHA256_*: see row_hash.cpp for why not EVP
#include "merkle.hpp"

#include <openssl/sha.h>

#include <algorithm>
#include <bit>

#include "sluice/base/hex.hpp"

namespace sluice::audit::detail {
namespace {

Digest sha256Of(unsigned char prefix, const unsigned char* a, std::size_t an,
                const unsigned char* b, std::size_t bn) {
  Digest out;
  SHA256_CTX ctx;
  SHA256_Init(&ctx);
  SHA256_Update(&ctx, &prefix, 1);
  SHA256_Update(&ctx, a, an);
  if (bn) SHA256_Update(&ctx, b, bn);
  SHA256_Final(out.data(), &ctx);
  return out;
}

/// The largest power of two strictly less than n (n >= 2).
std::uint64_t splitPoint(std::uint64_t n) { return std::bit_floor(n - 1); }

}  // namespace

std::string toHex(const Digest& d) { return base::hexEncode(std::span<const std::uint8_t>(d)); }

// Lowercase only, as sluice writes them: a digest has one spelling.
std::optional<Digest> fromHex(std::string_view hex) {
  if (hex.size() != 64 ||
      std::any_of(hex.begin(), hex.end(), [](char c) { return c >= 'A' && c <= 'F'; }))
    return std::nullopt;
  auto bytes = base::hexDecode(hex);
  if (!bytes) return std::nullopt;
  Digest d{};
  std::copy(bytes->begin(), bytes->end(), d.begin());
  return d;
}

Digest leafHash(const Digest& row_hash) {
  return sha256Of(0x00, row_hash.data(), row_hash.size(), nullptr, 0);
}

Digest nodeHash(const Digest& left, const Digest& right) {
  return sha256Of(0x01, left.data(), left.size(), right.data(), right.size());
}

Digest emptyRoot() {
  Digest out;
  SHA256(nullptr, 0, out.data());
  return out;
}

void MerkleFrontier::append(const Digest& row_hash) { appendLeaf(leafHash(row_hash)); }

void MerkleFrontier::appendLeaf(const Digest& leaf) {
  Digest node = leaf;
  // Each trailing 1 bit of the old size is a complete subtree of the same height as the one
  // being carried: merge them, like binary addition.
  for (std::uint64_t s = size_; s & 1; s >>= 1) {
    node = nodeHash(nodes_.back(), node);
    nodes_.pop_back();
  }
  nodes_.push_back(node);
  ++size_;
}

Digest MerkleFrontier::root() const {
  if (nodes_.empty()) return emptyRoot();
  // RFC 9162 splits at the largest power of two below n, so the tree's root folds the
  // subtrees from the smallest (right) to the largest (left).
  Digest r = nodes_.back();
  for (std::size_t i = nodes_.size() - 1; i-- > 0;) r = nodeHash(nodes_[i], r);
  return r;
}

std::string MerkleFrontier::serialize() const {
  std::string out;
  out.reserve(nodes_.size() * 64);
  for (const auto& n : nodes_) out += toHex(n);
  return out;
}

std::optional<MerkleFrontier> MerkleFrontier::parse(std::uint64_t size, std::string_view text) {
  if (text.size() != static_cast<std::size_t>(std::popcount(size)) * 64) return std::nullopt;
  MerkleFrontier f;
  f.size_ = size;
  for (std::size_t i = 0; i < text.size(); i += 64) {
    auto d = fromHex(text.substr(i, 64));
    if (!d) return std::nullopt;
    f.nodes_.push_back(*d);
  }
  return f;
}

Digest subtreeRoot(std::span<const Digest> leaves) {
  if (leaves.empty()) return emptyRoot();
  if (leaves.size() == 1) return leaves[0];
  std::uint64_t k = splitPoint(leaves.size());
  return nodeHash(subtreeRoot(leaves.first(k)), subtreeRoot(leaves.subspan(k)));
}

std::vector<Digest> inclusionPath(std::span<const Digest> leaves, std::uint64_t index) {
  std::vector<Digest> path;
  // PATH(m, D[n]) = PATH(m, D[0:k]) : MTH(D[k:n]) if m < k, else PATH(m - k, D[k:n]) :
  // MTH(D[0:k]); iteratively, collecting siblings from the root down, then reversed.
  while (leaves.size() > 1) {
    std::uint64_t k = splitPoint(leaves.size());
    if (index < k) {
      path.push_back(subtreeRoot(leaves.subspan(k)));
      leaves = leaves.first(k);
    } else {
      path.push_back(subtreeRoot(leaves.first(k)));
      leaves = leaves.subspan(k);
      index -= k;
    }
  }
  return {path.rbegin(), path.rend()};
}

std::vector<LeafRange> inclusionPathRanges(std::uint64_t index, std::uint64_t size) {
  std::vector<LeafRange> ranges;
  if (index >= size) return ranges;
  // inclusionPath's recursion on [lo, hi) instead of a span: the sibling of the half holding
  // the leaf, from the root down, then reversed.
  std::uint64_t lo = 0, hi = size;
  while (hi - lo > 1) {
    std::uint64_t mid = lo + splitPoint(hi - lo);
    if (index < mid) {
      ranges.push_back({mid, hi});
      hi = mid;
    } else {
      ranges.push_back({lo, mid});
      lo = mid;
    }
  }
  return {ranges.rbegin(), ranges.rend()};
}

InclusionPathBuilder::InclusionPathBuilder(std::uint64_t index, std::uint64_t size)
    : index_(index), size_(size) {
  std::vector<LeafRange> ranges = inclusionPathRanges(index, size);
  path_.resize(ranges.size());
  for (std::size_t i = 0; i < ranges.size(); ++i) slots_.push_back({ranges[i], i});
  // The ranges are disjoint, so in leaf order one is filled at a time.
  std::sort(slots_.begin(), slots_.end(),
            [](const Slot& a, const Slot& b) { return a.range.begin < b.range.begin; });
}

void InclusionPathBuilder::append(const Digest& leaf) {
  if (count_ >= size_) return;
  const std::uint64_t i = count_++;
  if (i == index_) {
    leaf_ = leaf;
    return;
  }
  if (next_ == slots_.size()) return;  // no path at all: index >= size
  // Every other leaf is in exactly one range, and the ranges come in leaf order.
  const Slot& slot = slots_[next_];
  range_.appendLeaf(leaf);
  if (i + 1 == slot.range.end) {
    path_[slot.position] = range_.root();
    range_ = MerkleFrontier();
    ++next_;
  }
}

Digest InclusionPathBuilder::root() const {
  if (size_ == 0) return emptyRoot();
  return rootFromPath(index_, size_, leaf_, path_).value_or(Digest{});
}

std::optional<Digest> rootFromPath(std::uint64_t index, std::uint64_t size, const Digest& leaf,
                                   std::span<const Digest> path) {
  if (index >= size) return std::nullopt;
  std::uint64_t fn = index, sn = size - 1;
  Digest r = leaf;
  for (const Digest& p : path) {
    if (sn == 0) return std::nullopt;
    if ((fn & 1) || fn == sn) {
      r = nodeHash(p, r);
      while (!(fn & 1) && fn != 0) {
        fn >>= 1;
        sn >>= 1;
      }
    } else {
      r = nodeHash(r, p);
    }
    fn >>= 1;
    sn >>= 1;
  }
  if (sn != 0) return std::nullopt;
  return r;
}

}  // namespace sluice::audit::detail
