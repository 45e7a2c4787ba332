// HMAC (digest.hpp) over OpenSSL 3's EVP_MAC. Unlike SHA-256 it goes through EVP: only the
// proxy's request signing calls it, never `sluice run`'s start-up.
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include <memory>

#include "sluice/base/digest.hpp"

namespace sluice::base {
namespace {

// The HMAC implementation, fetched once (fetching per call costs a provider lookup).
EVP_MAC* hmacAlgorithm() {
  static EVP_MAC* mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  return mac;
}

}  // namespace

std::string hmac(HmacDigest digest, std::string_view key,
                 std::span<const std::string_view> message) {
  char sha256[] = "SHA256";
  char sha512[] = "SHA512";
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST,
                                       digest == HmacDigest::kSha512 ? sha512 : sha256, 0),
      OSSL_PARAM_construct_end()};
  std::unique_ptr<EVP_MAC_CTX, decltype(&EVP_MAC_CTX_free)> ctx(EVP_MAC_CTX_new(hmacAlgorithm()),
                                                                EVP_MAC_CTX_free);
  unsigned char out[EVP_MAX_MD_SIZE];
  std::size_t len = 0;
  // An empty key is a valid HMAC key; OpenSSL wants a non-null pointer for it.
  static const unsigned char kEmpty = 0;
  const auto* k = key.empty() ? &kEmpty : reinterpret_cast<const unsigned char*>(key.data());
  if (!ctx || EVP_MAC_init(ctx.get(), k, key.size(), params) != 1) return {};
  for (auto piece : message)
    if (!piece.empty() &&
        EVP_MAC_update(ctx.get(), reinterpret_cast<const unsigned char*>(piece.data()),
                       piece.size()) != 1)
      return {};
  if (EVP_MAC_final(ctx.get(), out, &len, sizeof out) != 1) return {};
  return std::string(reinterpret_cast<const char*>(out), len);
}

}  // namespace sluice::base
