// Ed25519 keys of the audit store (issue 15): the private key signs checkpoints and
// attestations, the public key lets an auditor verify them anywhere. OpenSSL 3 EVP keys; files
// are PEM (private: PKCS#8, public: SubjectPublicKeyInfo). A key's id is the lowercase hex
// SHA-256 of its raw 32-byte public key.
#pragma once

#include <cstdint>
#include <expected>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "sluice/audit/store.hpp"

namespace sluice::audit {

/// A private Ed25519 key. Thread-safe: sign() may be called from any thread.
class SigningKey {
 public:
  /// Loads a PEM PKCS#8 Ed25519 private key. Refused, with a message naming the file, when the
  /// file is not owned by the current user or grants any permission to group or others (chmod
  /// 600 it), or is not an Ed25519 private key.
  static std::expected<std::shared_ptr<const SigningKey>, base::Error> load(
      const std::filesystem::path& file);
  /// A fresh key from OpenSSL's CSPRNG.
  static std::expected<std::shared_ptr<const SigningKey>, base::Error> generate();

  ~SigningKey();
  SigningKey(const SigningKey&) = delete;
  SigningKey& operator=(const SigningKey&) = delete;

  /// The 64-byte Ed25519 signature of `message` (raw bytes).
  std::string sign(std::string_view message) const;
  /// Lowercase hex SHA-256 of the raw public key.
  const std::string& keyId() const { return key_id_; }
  /// The public half as PEM (what `audit keygen` writes to audit.pub).
  std::string publicKeyPem() const;
  /// The private key as PEM PKCS#8 (only `audit keygen` writes it, to a 0600 file).
  std::string privateKeyPem() const;

  struct Raw;

 private:
  explicit SigningKey(Raw* raw, std::string key_id);
  Raw* raw_;
  std::string key_id_;
};

/// A public Ed25519 key, for verifying.
class PublicKey {
 public:
  /// Loads a PEM public key (SubjectPublicKeyInfo) from `file`; errors name the file.
  static std::expected<std::shared_ptr<const PublicKey>, base::Error> load(
      const std::filesystem::path& file);
  static std::expected<std::shared_ptr<const PublicKey>, base::Error> fromPem(
      std::string_view pem, std::string_view where);
  ~PublicKey();
  PublicKey(const PublicKey&) = delete;
  PublicKey& operator=(const PublicKey&) = delete;

  /// True when `signature` (raw 64 bytes) is this key's signature of `message`.
  bool verify(std::string_view message, std::string_view signature) const;
  const std::string& keyId() const { return key_id_; }

  struct Raw;

 private:
  explicit PublicKey(Raw* raw, std::string key_id);
  Raw* raw_;
  std::string key_id_;
};

/// `sluice audit keygen --out DIR`: writes DIR/audit.key (0600, created exclusively: an
/// existing file is never overwritten) and DIR/audit.pub (0644); creates DIR (0700) if missing.
/// Returns the new key's id.
std::expected<std::string, base::Error> generateKeyFiles(const std::filesystem::path& dir);

/// The exact bytes a checkpoint's signature covers (docs/audit.md, "Signed checkpoints"):
/// "sluice-checkpoint v1\n<position>\n<root hex>\n<ts ms>\n".
std::string checkpointSignedText(std::int64_t position, std::string_view root_hex,
                                 std::int64_t ts_ms);

/// Standard base64 (RFC 4648, with padding).
std::string base64Encode(std::string_view bytes);
/// nullopt on anything but canonical standard base64.
std::optional<std::string> base64Decode(std::string_view text);

}  // namespace sluice::audit
