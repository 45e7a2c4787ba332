// SHA-256 over OpenSSL's EVP interface.
#include "sluice/base/digest.hpp"

#include <openssl/evp.h>

#include <cstdlib>

#include "sluice/base/hex.hpp"

namespace sluice::base {

struct Sha256::State {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  ~State() { EVP_MD_CTX_free(ctx); }
  void reset() {
    // Only an allocation failure inside OpenSSL makes this fail; nothing sane can follow.
    if (!ctx || EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) != 1) std::abort();
  }
};

Sha256::Sha256() : state_(std::make_unique<State>()) { state_->reset(); }
Sha256::~Sha256() = default;
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&&) noexcept = default;

void Sha256::update(std::string_view data) {
  EVP_DigestUpdate(state_->ctx, data.data(), data.size());
}

Sha256Digest Sha256::finish() {
  Sha256Digest out{};
  unsigned int len = 0;
  EVP_DigestFinal_ex(state_->ctx, out.data(), &len);
  state_->reset();
  return out;
}

std::string Sha256::finishHex() { return hexEncode(finish()); }

Sha256Digest sha256(std::string_view data) {
  Sha256Digest out{};
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), out.data(), &len, EVP_sha256(), nullptr);
  return out;
}

std::string sha256Hex(std::string_view data) { return hexEncode(sha256(data)); }

}  // namespace sluice::base
