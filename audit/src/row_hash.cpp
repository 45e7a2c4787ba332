// Canonical row encoding + SHA-256; see row_hash.hpp and docs/audit.md.
// OpenSSL's SHA256_* functions (deprecated in 3.0, still supported) call the implementation
// directly; EVP would initialise the library context and read openssl.cnf first (~0.5 ms,
// a tenth of a short `sluice run`) and costs more per row.
#define OPENSSL_SUPPRESS_DEPRECATED
#include "row_hash.hpp"

#include <openssl/sha.h>

#include <bit>
#include <cstring>

#include "sluice/base/hex.hpp"

namespace sluice::audit::detail {
namespace {

/// Bytes putValue appends for `v`.
std::size_t encodedSize(const Value& v) {
  if (auto* s = std::get_if<std::string_view>(&v)) return 9 + s->size();
  if (auto* b = std::get_if<Blob>(&v)) return 9 + b->v.size();
  return std::holds_alternative<std::monostate>(v) ? 1 : 9;
}

char* putU64(char* p, std::uint64_t v) {
  // Big-endian, fixed 8 bytes: no ambiguity between adjacent fields. One swap and one store
  // (a byte loop here was a third of the encoder's time).
  if constexpr (std::endian::native == std::endian::little) v = std::byteswap(v);
  std::memcpy(p, &v, sizeof v);
  return p + sizeof v;
}

char* putBytes(char* p, char tag, std::string_view s) {
  *p++ = tag;
  p = putU64(p, s.size());
  std::memcpy(p, s.data(), s.size());
  return p + s.size();
}

char* putValue(char* p, const Value& v) {
  switch (v.index()) {
    case 1:
      *p++ = 'I';
      return putU64(p, static_cast<std::uint64_t>(std::get<std::int64_t>(v)));
    case 2:
      return putBytes(p, 'T', std::get<std::string_view>(v));
    case 3:
      *p++ = 'R';
      return putU64(p, std::bit_cast<std::uint64_t>(std::get<Real>(v).v));
    case 4:
      return putBytes(p, 'B', std::get<Blob>(v).v);
    default:
      *p++ = 'N';
      return p;
  }
}

}  // namespace

RowHasher::RowHasher() { buf_.reserve(1024); }

std::string RowHasher::sha256(std::string_view bytes) {
  unsigned char out[SHA256_DIGEST_LENGTH];
  SHA256_CTX ctx;
  SHA256_Init(&ctx);
  SHA256_Update(&ctx, bytes.data(), bytes.size());
  SHA256_Final(out, &ctx);
  return base::hexEncode(std::span<const std::uint8_t>(out, SHA256_DIGEST_LENGTH));
}

void RowHasher::hash(std::string_view table, std::int64_t seq, std::string_view prev_hash,
                     std::span<const Value> values, HexDigest& out, unsigned char* raw) {
  static constexpr std::string_view kDomain = "sluice-audit-v1";
  std::size_t size = kDomain.size() + 1 + table.size() + 1 + 9 + 9 + prev_hash.size();
  for (const Value& v : values) size += encodedSize(v);
  buf_.resize(size);
  char* p = buf_.data();
  std::memcpy(p, kDomain.data(), kDomain.size());
  p += kDomain.size();
  *p++ = '\0';
  std::memcpy(p, table.data(), table.size());
  p += table.size();
  *p++ = '\0';
  p = putValue(p, Value{seq});
  p = putValue(p, Value{prev_hash});
  for (const Value& v : values) p = putValue(p, v);
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256_CTX ctx;
  SHA256_Init(&ctx);
  SHA256_Update(&ctx, buf_.data(), static_cast<std::size_t>(p - buf_.data()));
  SHA256_Final(md, &ctx);
  base::hexEncodeInto(std::span<const std::uint8_t>(md, SHA256_DIGEST_LENGTH), out.hex.data());
  if (raw) std::memcpy(raw, md, SHA256_DIGEST_LENGTH);
}

std::string RowHasher::hash(std::string_view table, std::int64_t seq, std::string_view prev_hash,
                            std::span<const Value> values) {
  HexDigest d;
  hash(table, seq, prev_hash, values, d);
  return std::string(d.view());
}

}  // namespace sluice::audit::detail
