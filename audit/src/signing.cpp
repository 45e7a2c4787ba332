// Ed25519 keys over OpenSSL 3's EVP interface; see signing.hpp.
#include "sluice/audit/signing.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <memory>

#include "row_hash.hpp"

namespace sluice::audit {
namespace {

struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct MdCtxFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;
using Bio = std::unique_ptr<BIO, BioFree>;
using MdCtx = std::unique_ptr<EVP_MD_CTX, MdCtxFree>;

/// OpenSSL's last error as text ("" if none), clearing the queue.
std::string opensslError() {
  unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "unknown OpenSSL error";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  return buf;
}

/// Lowercase hex SHA-256 of the raw public key: the key id.
std::expected<std::string, base::Error> keyIdOf(EVP_PKEY* key) {
  std::array<unsigned char, 32> raw{};
  std::size_t len = raw.size();
  if (EVP_PKEY_get_raw_public_key(key, raw.data(), &len) != 1 || len != raw.size())
    return std::unexpected(base::Error{
        base::Code::kInternal, "cannot read the raw Ed25519 public key: " + opensslError()});
  detail::RowHasher hasher;
  return hasher.sha256(std::string_view(reinterpret_cast<const char*>(raw.data()), len));
}

std::string pemOf(EVP_PKEY* key, bool private_key) {
  Bio bio(BIO_new(BIO_s_mem()));
  int ok = private_key
               ? PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr)
               : PEM_write_bio_PUBKEY(bio.get(), key);
  if (ok != 1) return {};
  char* data = nullptr;
  long n = BIO_get_mem_data(bio.get(), &data);
  std::string out(data, static_cast<std::size_t>(n));
  return out;
}

/// Reads a whole file through an open descriptor. The read buffer, and what was read when the
/// read fails, are wiped: the file may be the private key.
std::expected<std::string, base::Error> readFd(int fd, const std::filesystem::path& file) {
  std::string out;
  char buf[4096];
  auto fail = [&](std::string why) {
    OPENSSL_cleanse(buf, sizeof buf);
    OPENSSL_cleanse(out.data(), out.size());
    return std::unexpected(base::Error{base::Code::kIo, file.string() + ": " + why});
  };
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail(std::string("cannot read: ") + std::strerror(errno));
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
    if (out.size() > (1u << 20)) return fail("too large for a key");
  }
  OPENSSL_cleanse(buf, sizeof buf);
  return out;
}

/// Opens a private key file and checks it is the current user's and private to them: a key
/// others can read is no longer a secret, and one another user owns could be swapped.
std::expected<std::string, base::Error> readPrivateFile(const std::filesystem::path& file) {
  int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    return std::unexpected(base::Error{
        base::Code::kIo,
        fmt::format("{}: cannot open the signing key: {}", file.string(), std::strerror(errno))});
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return std::unexpected(base::Error{base::Code::kInvalidArgument,
                                       file.string() + ": the signing key is not a regular file"});
  }
  if (st.st_uid != ::geteuid()) {
    ::close(fd);
    return std::unexpected(base::Error{
        base::Code::kPermissionDenied,
        fmt::format(
            "{}: the signing key is owned by uid {}, not by the user running sluice (uid {}); "
            "refusing a key another user controls",
            file.string(), st.st_uid, ::geteuid())});
  }
  if ((st.st_mode & 077) != 0) {
    ::close(fd);
    return std::unexpected(base::Error{
        base::Code::kPermissionDenied,
        fmt::format(
            "{}: the signing key has mode {:04o}: group or other users may read or change it; "
            "chmod 600 {}",
            file.string(), st.st_mode & 07777, file.string())});
  }
  auto text = readFd(fd, file);
  ::close(fd);
  return text;
}

}  // namespace

struct SigningKey::Raw {
  Pkey key;
};
struct PublicKey::Raw {
  Pkey key;
};

SigningKey::SigningKey(Raw* raw, std::string key_id) : raw_(raw), key_id_(std::move(key_id)) {}
SigningKey::~SigningKey() { delete raw_; }

std::expected<std::shared_ptr<const SigningKey>, base::Error> SigningKey::load(
    const std::filesystem::path& file) {
  auto text = readPrivateFile(file);
  if (!text) return std::unexpected(text.error());
  Bio bio(BIO_new_mem_buf(text->data(), static_cast<int>(text->size())));
  Pkey key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  OPENSSL_cleanse(text->data(), text->size());
  if (!key) {
    return std::unexpected(
        base::Error{base::Code::kInvalidArgument,
                    file.string() + ": not a PEM private key (" + opensslError() + ")"});
  }
  if (EVP_PKEY_get_id(key.get()) != EVP_PKEY_ED25519) {
    return std::unexpected(base::Error{base::Code::kInvalidArgument,
                                       file.string() + ": not an Ed25519 key (sluice audit keygen "
                                                       "makes one)"});
  }
  auto id = keyIdOf(key.get());
  if (!id)
    return std::unexpected(
        base::Error{base::Code::kInvalidArgument, file.string() + ": " + id.error().message});
  return std::shared_ptr<const SigningKey>(new SigningKey(new Raw{std::move(key)}, *id));
}

std::expected<std::shared_ptr<const SigningKey>, base::Error> SigningKey::generate() {
  Pkey key(EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519"));
  if (!key)
    return std::unexpected(
        base::Error{base::Code::kInternal, "cannot generate an Ed25519 key: " + opensslError()});
  auto id = keyIdOf(key.get());
  if (!id) return std::unexpected(id.error());
  return std::shared_ptr<const SigningKey>(new SigningKey(new Raw{std::move(key)}, *id));
}

std::string SigningKey::sign(std::string_view message) const {
  MdCtx ctx(EVP_MD_CTX_new());
  std::string sig(64, '\0');
  std::size_t len = sig.size();
  // Ed25519 is "pure": no digest is named, the whole message goes to one DigestSign call.
  if (!ctx || EVP_DigestSignInit(ctx.get(), nullptr, nullptr, nullptr, raw_->key.get()) != 1 ||
      EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(sig.data()), &len,
                     reinterpret_cast<const unsigned char*>(message.data()), message.size()) != 1) {
    ERR_clear_error();
    return {};
  }
  sig.resize(len);
  return sig;
}

std::string SigningKey::publicKeyPem() const { return pemOf(raw_->key.get(), false); }
std::string SigningKey::privateKeyPem() const { return pemOf(raw_->key.get(), true); }

PublicKey::PublicKey(Raw* raw, std::string key_id) : raw_(raw), key_id_(std::move(key_id)) {}
PublicKey::~PublicKey() { delete raw_; }

std::expected<std::shared_ptr<const PublicKey>, base::Error> PublicKey::fromPem(
    std::string_view pem, std::string_view where) {
  Bio bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  Pkey key(PEM_read_bio_PUBKEY(bio.get(), nullptr, nullptr, nullptr));
  if (!key) {
    return std::unexpected(
        base::Error{base::Code::kInvalidArgument,
                    fmt::format("{}: not a PEM public key ({})", where, opensslError())});
  }
  if (EVP_PKEY_get_id(key.get()) != EVP_PKEY_ED25519)
    return std::unexpected(base::Error{base::Code::kInvalidArgument,
                                       fmt::format("{}: not an Ed25519 public key", where)});
  auto id = keyIdOf(key.get());
  if (!id)
    return std::unexpected(base::Error{base::Code::kInvalidArgument,
                                       fmt::format("{}: {}", where, id.error().message)});
  return std::shared_ptr<const PublicKey>(new PublicKey(new Raw{std::move(key)}, *id));
}

std::expected<std::shared_ptr<const PublicKey>, base::Error> PublicKey::load(
    const std::filesystem::path& file) {
  int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    return std::unexpected(base::Error{
        base::Code::kIo,
        fmt::format("{}: cannot open the public key: {}", file.string(), std::strerror(errno))});
  }
  auto text = readFd(fd, file);
  ::close(fd);
  if (!text) return std::unexpected(text.error());
  return fromPem(*text, file.string());
}

bool PublicKey::verify(std::string_view message, std::string_view signature) const {
  if (signature.size() != 64) return false;
  MdCtx ctx(EVP_MD_CTX_new());
  bool ok =
      ctx && EVP_DigestVerifyInit(ctx.get(), nullptr, nullptr, nullptr, raw_->key.get()) == 1 &&
      EVP_DigestVerify(ctx.get(), reinterpret_cast<const unsigned char*>(signature.data()),
                       signature.size(), reinterpret_cast<const unsigned char*>(message.data()),
                       message.size()) == 1;
  ERR_clear_error();
  return ok;
}

std::expected<std::string, base::Error> generateKeyFiles(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec)) {
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
      return std::unexpected(base::Error{
          base::Code::kIo,
          fmt::format("{}: cannot create the directory: {}", dir.string(), std::strerror(errno))});
    }
  } else if (!std::filesystem::is_directory(dir, ec)) {
    return std::unexpected(
        base::Error{base::Code::kInvalidArgument, dir.string() + ": not a directory"});
  }
  const auto key_path = dir / "audit.key";
  const auto pub_path = dir / "audit.pub";
  for (const auto& p : {key_path, pub_path}) {
    if (std::filesystem::exists(std::filesystem::symlink_status(p, ec))) {
      return std::unexpected(base::Error{
          base::Code::kConflict, p.string() + ": already exists; refusing to overwrite a key "
                                              "(move it away first)"});
    }
  }
  auto key = SigningKey::generate();
  if (!key) return std::unexpected(key.error());
  auto writeFile = [](const std::filesystem::path& p, const std::string& text,
                      mode_t mode) -> std::expected<void, base::Error> {
    // O_EXCL: never follow or replace something that appeared since the check above.
    int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
    if (fd < 0) {
      return std::unexpected(base::Error{
          base::Code::kIo, fmt::format("{}: cannot create: {}", p.string(), std::strerror(errno))});
    }
    bool ok = ::fchmod(fd, mode) == 0;  // the umask may have taken bits off a public key
    std::size_t off = 0;
    while (ok && off < text.size()) {
      ssize_t n = ::write(fd, text.data() + off, text.size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        ok = false;
      else
        off += static_cast<std::size_t>(n);
    }
    ok = ok && ::fsync(fd) == 0;
    int err = errno;
    ::close(fd);
    if (!ok) {
      ::unlink(p.c_str());
      return std::unexpected(base::Error{
          base::Code::kIo, fmt::format("{}: cannot write: {}", p.string(), std::strerror(err))});
    }
    return {};
  };
  std::string private_pem = (*key)->privateKeyPem();
  auto r = writeFile(key_path, private_pem, 0600);
  OPENSSL_cleanse(private_pem.data(), private_pem.size());
  if (!r) return std::unexpected(r.error());
  if (auto w = writeFile(pub_path, (*key)->publicKeyPem(), 0644); !w) {
    ::unlink(key_path.c_str());
    return std::unexpected(w.error());
  }
  return (*key)->keyId();
}

std::string checkpointSignedText(std::int64_t position, std::string_view root_hex,
                                 std::int64_t ts_ms) {
  return fmt::format("sluice-checkpoint v1\n{}\n{}\n{}\n", position, root_hex, ts_ms);
}

std::string base64Encode(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3), '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(bytes.data()),
                          static_cast<int>(bytes.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

std::optional<std::string> base64Decode(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out(3 * (text.size() / 4), '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(text.data()),
                          static_cast<int>(text.size()));
  if (n < 0) return std::nullopt;
  // EVP_DecodeBlock keeps the padding's zero bytes; drop one per '='.
  std::size_t pad = 0;
  if (!text.empty() && text.back() == '=') ++pad;
  if (text.size() > 1 && text[text.size() - 2] == '=') ++pad;
  out.resize(static_cast<std::size_t>(n) - pad);
  // Only canonical encodings: re-encoding must give the same text (no whitespace, no junk).
  if (base64Encode(out) != text) return std::nullopt;
  return out;
}

}  // namespace sluice::audit
