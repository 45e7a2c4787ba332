// The canonical encoding of a chained row and its SHA-256 (docs/audit.md, "Hash chain").
// Both the writer (hashing what it binds) and verify (hashing what it reads back) go through
// here, so the two can never disagree about the encoding.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>

namespace sluice::audit::detail {

/// A column value as SQLite stores it: NULL, INTEGER or TEXT (the chained tables are STRICT
/// and hold no REAL or BLOB; verify still encodes them distinctly if someone writes one).
struct Real {
  double v;
};
struct Blob {
  std::string_view v;
};
using Value = std::variant<std::monostate, std::int64_t, std::string_view, Real, Blob>;

/// Text, or NULL when empty (optional columns store NULL rather than "").
inline Value textOrNull(std::string_view s) { return s.empty() ? Value{} : Value{s}; }

/// The chain's first prev_hash.
inline constexpr std::string_view kGenesisHash =
    "0000000000000000000000000000000000000000000000000000000000000000";

/// A SHA-256 as 64 lowercase hex characters, without allocating.
struct HexDigest {
  std::array<char, 64> hex{};
  std::string_view view() const { return {hex.data(), hex.size()}; }
  bool assign(std::string_view s) {
    if (s.size() != hex.size()) return false;
    std::copy(s.begin(), s.end(), hex.begin());
    return true;
  }
};

/// Computes row hashes; holds a reusable digest context and buffer (one per thread).
class RowHasher {
 public:
  RowHasher();
  RowHasher(const RowHasher&) = delete;
  RowHasher& operator=(const RowHasher&) = delete;

  /// Lowercase hex SHA-256 of the canonical encoding of (table, seq, prev_hash, values).
  std::string hash(std::string_view table, std::int64_t seq, std::string_view prev_hash,
                   std::span<const Value> values);
  /// `raw`, when given, receives the 32 digest bytes too (the Merkle tree's leaf input).
  void hash(std::string_view table, std::int64_t seq, std::string_view prev_hash,
            std::span<const Value> values, HexDigest& out, unsigned char* raw = nullptr);

  /// Lowercase hex SHA-256 of arbitrary bytes (policy texts).
  std::string sha256(std::string_view bytes);

 private:
  std::string buf_;
};

}  // namespace sluice::audit::detail
