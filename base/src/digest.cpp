// SHA-256 over OpenSSL's low-level SHA256_* functions, not EVP: EVP's first call initialises
// providers and engines (about 0.5 ms), which `sluice run` would pay on every execution for
// its policy's digest. In OpenSSL 3.0 even SHA256() goes through EVP; SHA256_* do not.
#define OPENSSL_SUPPRESS_DEPRECATED
#include "sluice/base/digest.hpp"

#include <openssl/sha.h>

#include "sluice/base/hex.hpp"

namespace sluice::base {

struct Sha256::State {
  SHA256_CTX ctx;
};

Sha256::Sha256() : state_(std::make_unique<State>()) { SHA256_Init(&state_->ctx); }
Sha256::~Sha256() = default;
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&&) noexcept = default;

void Sha256::update(std::string_view data) {
  SHA256_Update(&state_->ctx, data.data(), data.size());
}

Sha256Digest Sha256::finish() {
  Sha256Digest out{};
  SHA256_Final(out.data(), &state_->ctx);
  SHA256_Init(&state_->ctx);
  return out;
}

std::string Sha256::finishHex() { return hexEncode(finish()); }

Sha256Digest sha256(std::string_view data) {
  Sha256 s;
  s.update(data);
  return s.finish();
}

std::string sha256Hex(std::string_view data) { return hexEncode(sha256(data)); }

}  // namespace sluice::base
