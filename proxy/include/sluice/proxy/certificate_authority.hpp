// The certificate authority behind TLS inspection: a per-execution CA held only in memory
// (or a long-lived one from `sluice ca init`), minting leaf certificates on demand for the
// CONNECT host, cached in a bounded LRU.
#pragma once

#include <openssl/types.h>

#include <chrono>
#include <cstddef>
#include <expected>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

namespace sluice::proxy {

/// A minted leaf: certificate (SAN = the host) and its private key. Immutable, shareable.
class LeafCertificate {
 public:
  LeafCertificate(X509* cert, EVP_PKEY* key);  // takes ownership of cert; up-refs key
  ~LeafCertificate();
  LeafCertificate(const LeafCertificate&) = delete;
  LeafCertificate& operator=(const LeafCertificate&) = delete;

  X509* certificate() const { return cert_; }
  EVP_PKEY* privateKey() const { return key_; }
  std::string pem() const;

 private:
  X509* cert_;
  EVP_PKEY* key_;
};

struct LeafCacheStats {
  std::size_t size = 0;
  std::size_t hits = 0;
  std::size_t misses = 0;
};

class CertificateAuthority {
 public:
  /// A fresh EC P-256 CA whose key exists only in this process.
  static std::expected<std::shared_ptr<CertificateAuthority>, std::string> createEphemeral(
      std::string_view common_name, std::chrono::seconds validity = std::chrono::hours(24),
      std::size_t cache_capacity = 1024);

  /// `sluice ca init --dir DIR`: writes DIR/ca.key (mode 0600, never overwritten) and
  /// DIR/ca.pem. Fails if either exists.
  static std::expected<void, std::string> initDirectory(
      const std::filesystem::path& dir,
      std::chrono::seconds validity = std::chrono::hours(24 * 365 * 5));

  /// Loads DIR/ca.key and DIR/ca.pem; refuses a key file that group or others can access.
  static std::expected<std::shared_ptr<CertificateAuthority>, std::string> loadDirectory(
      const std::filesystem::path& dir, std::size_t cache_capacity = 1024);

  ~CertificateAuthority();
  CertificateAuthority(const CertificateAuthority&) = delete;
  CertificateAuthority& operator=(const CertificateAuthority&) = delete;

  /// The CA certificate (PEM), to install as trusted in the sandbox.
  std::string certificatePem() const;
  X509* certificate() const;

  /// A leaf for `host` (a DNS name or an IP literal's canonical text), from the cache or
  /// freshly minted. Thread-safe.
  std::expected<std::shared_ptr<const LeafCertificate>, std::string> leafFor(std::string_view host);

  LeafCacheStats cacheStats() const;

  /// The system CA bundle with `extra_pem` appended: what the sandbox trusts.
  static std::string mergedBundle(
      std::string_view extra_pem,
      const std::filesystem::path& system_bundle = "/etc/ssl/certs/ca-certificates.crt");

  struct Impl;

 private:
  explicit CertificateAuthority(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::proxy
