// Minting certificates with OpenSSL 3: EC P-256 keys, a CA with keyCertSign and pathlen 0,
// leaves with subjectAltName = the CONNECT host and serverAuth. One leaf key per CA is shared
// by every leaf, so a mint is one ECDSA signature rather than a key generation.
#include "sluice/proxy/certificate_authority.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <list>
#include <mutex>
#include <sstream>
#include <unordered_map>

namespace sluice::proxy {
namespace {

std::string sslError(std::string_view what) {
  unsigned long e = ERR_get_error();
  char buf[256] = "unknown error";
  if (e != 0) ERR_error_string_n(e, buf, sizeof buf);
  ERR_clear_error();
  return std::string(what) + ": " + buf;
}

EVP_PKEY* newEcKey() { return EVP_EC_gen("P-256"); }

bool addExt(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (!ext) return false;
  bool ok = X509_add_ext(cert, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  return ok;
}

bool randomSerial(X509* cert) {
  unsigned char bytes[16];
  if (RAND_bytes(bytes, sizeof bytes) != 1) return false;
  bytes[0] &= 0x7F;  // positive
  BIGNUM* bn = BN_bin2bn(bytes, sizeof bytes, nullptr);
  if (!bn) return false;
  bool ok = BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert)) != nullptr;
  BN_free(bn);
  return ok;
}

std::string toPem(X509* cert) {
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(bio, cert);
  char* data = nullptr;
  long len = BIO_get_mem_data(bio, &data);
  std::string out(data, static_cast<std::size_t>(len));
  BIO_free(bio);
  return out;
}

}  // namespace

LeafCertificate::LeafCertificate(X509* cert, EVP_PKEY* key) : cert_(cert), key_(key) {
  EVP_PKEY_up_ref(key_);
}
LeafCertificate::~LeafCertificate() {
  X509_free(cert_);
  EVP_PKEY_free(key_);
}
std::string LeafCertificate::pem() const { return toPem(cert_); }

struct CertificateAuthority::Impl {
  X509* ca_cert = nullptr;
  EVP_PKEY* ca_key = nullptr;
  EVP_PKEY* leaf_key = nullptr;
  std::size_t capacity = 1024;

  mutable std::mutex mu;
  std::list<std::pair<std::string, std::shared_ptr<const LeafCertificate>>> lru;
  std::unordered_map<std::string, decltype(lru)::iterator> index;
  LeafCacheStats stats;

  ~Impl() {
    X509_free(ca_cert);
    EVP_PKEY_free(ca_key);
    EVP_PKEY_free(leaf_key);
  }

  std::expected<std::shared_ptr<const LeafCertificate>, std::string> mint(
      const std::string& host) const {
    X509* cert = X509_new();
    if (!cert) return std::unexpected(sslError("X509_new"));
    auto fail = [&](std::string_view what) {
      X509_free(cert);
      return std::unexpected(sslError(what));
    };
    X509_set_version(cert, 2);
    if (!randomSerial(cert)) return fail("serial");
    // Start a little in the past to tolerate clock skew in the sandbox's clients; never
    // outlive the CA.
    X509_gmtime_adj(X509_getm_notBefore(cert), -300);
    X509_gmtime_adj(X509_getm_notAfter(cert), 24 * 3600);
    if (ASN1_TIME_compare(X509_get0_notAfter(cert), X509_get0_notAfter(ca_cert)) > 0) {
      X509_set1_notAfter(cert, X509_get0_notAfter(ca_cert));
    }
    X509_NAME* name = X509_get_subject_name(cert);
    std::string cn = host.substr(0, 64);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
    X509_set_issuer_name(cert, X509_get_subject_name(ca_cert));
    X509_set_pubkey(cert, leaf_key);
    unsigned char buf[16];
    bool is_ip =
        inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
    std::string san = (is_ip ? "IP:" : "DNS:") + host;
    if (!addExt(cert, ca_cert, NID_basic_constraints, "critical,CA:FALSE") ||
        !addExt(cert, ca_cert, NID_key_usage, "critical,digitalSignature") ||
        !addExt(cert, ca_cert, NID_ext_key_usage, "serverAuth") ||
        !addExt(cert, ca_cert, NID_subject_alt_name, san.c_str()) ||
        !addExt(cert, ca_cert, NID_subject_key_identifier, "hash") ||
        !addExt(cert, ca_cert, NID_authority_key_identifier, "keyid:always")) {
      return fail("certificate extensions for " + host);
    }
    if (X509_sign(cert, ca_key, EVP_sha256()) == 0) return fail("signing leaf for " + host);
    return std::make_shared<const LeafCertificate>(cert, leaf_key);
  }
};

CertificateAuthority::CertificateAuthority(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CertificateAuthority::~CertificateAuthority() = default;

namespace {

std::expected<std::unique_ptr<CertificateAuthority::Impl>, std::string> makeCa(
    std::string_view common_name, std::chrono::seconds validity) {
  auto impl = std::make_unique<CertificateAuthority::Impl>();
  impl->ca_key = newEcKey();
  impl->leaf_key = newEcKey();
  if (!impl->ca_key || !impl->leaf_key) return std::unexpected(sslError("EC P-256 key"));
  X509* cert = X509_new();
  impl->ca_cert = cert;
  X509_set_version(cert, 2);
  if (!randomSerial(cert)) return std::unexpected(sslError("serial"));
  X509_gmtime_adj(X509_getm_notBefore(cert), -300);
  X509_gmtime_adj(X509_getm_notAfter(cert), static_cast<long>(validity.count()));
  X509_NAME* name = X509_get_subject_name(cert);
  std::string cn(common_name.substr(0, 64));
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("sluice"), -1, -1, 0);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509_set_issuer_name(cert, name);
  X509_set_pubkey(cert, impl->ca_key);
  if (!addExt(cert, cert, NID_basic_constraints, "critical,CA:TRUE,pathlen:0") ||
      !addExt(cert, cert, NID_key_usage, "critical,keyCertSign,cRLSign") ||
      !addExt(cert, cert, NID_subject_key_identifier, "hash")) {
    return std::unexpected(sslError("CA extensions"));
  }
  if (X509_sign(cert, impl->ca_key, EVP_sha256()) == 0) {
    return std::unexpected(sslError("signing CA certificate"));
  }
  return impl;
}

}  // namespace

std::expected<std::shared_ptr<CertificateAuthority>, std::string>
CertificateAuthority::createEphemeral(std::string_view common_name, std::chrono::seconds validity,
                                      std::size_t cache_capacity) {
  auto impl = makeCa(common_name, validity);
  if (!impl) return std::unexpected(impl.error());
  (*impl)->capacity = cache_capacity == 0 ? 1 : cache_capacity;
  return std::shared_ptr<CertificateAuthority>(new CertificateAuthority(std::move(*impl)));
}

std::expected<void, std::string> CertificateAuthority::initDirectory(
    const std::filesystem::path& dir, std::chrono::seconds validity) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return std::unexpected("cannot create " + dir.string() + ": " + ec.message());
  auto impl = makeCa("sluice proxy CA", validity);
  if (!impl) return std::unexpected(impl.error());
  auto key_path = dir / "ca.key";
  auto cert_path = dir / "ca.pem";
  if (std::filesystem::exists(cert_path)) {
    return std::unexpected(cert_path.string() + " already exists; refusing to overwrite a CA");
  }
  // O_EXCL + mode 0600 at creation: the key is never readable by others, not even briefly.
  int fd = ::open(key_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    return std::unexpected("cannot create " + key_path.string() + ": " + std::strerror(errno) +
                           (errno == EEXIST ? " (refusing to overwrite a CA key)" : ""));
  }
  ::fchmod(fd, 0600);  // umask could only have narrowed it; make it exact
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_PrivateKey(bio, (*impl)->ca_key, nullptr, nullptr, 0, nullptr, nullptr);
  char* data = nullptr;
  long len = BIO_get_mem_data(bio, &data);
  bool ok = ::write(fd, data, static_cast<std::size_t>(len)) == len && ::fsync(fd) == 0;
  OPENSSL_cleanse(data, static_cast<std::size_t>(len));
  BIO_free(bio);
  ::close(fd);
  if (!ok) return std::unexpected("writing " + key_path.string() + ": " + std::strerror(errno));
  std::ofstream out(cert_path);
  out << toPem((*impl)->ca_cert);
  if (!out) return std::unexpected("writing " + cert_path.string() + " failed");
  return {};
}

std::expected<std::shared_ptr<CertificateAuthority>, std::string>
CertificateAuthority::loadDirectory(const std::filesystem::path& dir, std::size_t cache_capacity) {
  auto key_path = (dir / "ca.key").string();
  auto cert_path = (dir / "ca.pem").string();
  struct stat st {};
  if (::stat(key_path.c_str(), &st) != 0) {
    return std::unexpected("CA key " + key_path + ": " + std::strerror(errno) +
                           " (create one with: sluice ca init --dir " + dir.string() + ")");
  }
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", st.st_mode & 07777);
    return std::unexpected("CA key " + key_path + " has mode " + mode +
                           "; refusing a key that group or others can access (chmod 600 " +
                           key_path + ")");
  }
  auto impl = std::make_unique<Impl>();
  impl->capacity = cache_capacity == 0 ? 1 : cache_capacity;
  FILE* kf = std::fopen(key_path.c_str(), "r");
  if (!kf) return std::unexpected("cannot read " + key_path + ": " + std::strerror(errno));
  impl->ca_key = PEM_read_PrivateKey(kf, nullptr, nullptr, nullptr);
  std::fclose(kf);
  if (!impl->ca_key) return std::unexpected(sslError("reading CA key " + key_path));
  FILE* cf = std::fopen(cert_path.c_str(), "r");
  if (!cf) return std::unexpected("cannot read " + cert_path + ": " + std::strerror(errno));
  impl->ca_cert = PEM_read_X509(cf, nullptr, nullptr, nullptr);
  std::fclose(cf);
  if (!impl->ca_cert) return std::unexpected(sslError("reading CA certificate " + cert_path));
  if (X509_check_private_key(impl->ca_cert, impl->ca_key) != 1) {
    return std::unexpected(cert_path + " does not match " + key_path);
  }
  impl->leaf_key = newEcKey();
  if (!impl->leaf_key) return std::unexpected(sslError("EC P-256 key"));
  return std::shared_ptr<CertificateAuthority>(new CertificateAuthority(std::move(impl)));
}

std::string CertificateAuthority::certificatePem() const { return toPem(impl_->ca_cert); }
X509* CertificateAuthority::certificate() const { return impl_->ca_cert; }

std::expected<std::shared_ptr<const LeafCertificate>, std::string> CertificateAuthority::leafFor(
    std::string_view host) {
  std::string key(host);
  {
    std::lock_guard lock(impl_->mu);
    if (auto it = impl_->index.find(key); it != impl_->index.end()) {
      impl_->lru.splice(impl_->lru.begin(), impl_->lru, it->second);
      ++impl_->stats.hits;
      return it->second->second;
    }
    ++impl_->stats.misses;
  }
  auto leaf = impl_->mint(key);  // outside the lock: signing takes tens of microseconds
  if (!leaf) return leaf;
  std::lock_guard lock(impl_->mu);
  if (auto it = impl_->index.find(key); it != impl_->index.end()) return it->second->second;
  impl_->lru.emplace_front(key, *leaf);
  impl_->index[key] = impl_->lru.begin();
  while (impl_->lru.size() > impl_->capacity) {
    impl_->index.erase(impl_->lru.back().first);
    impl_->lru.pop_back();
  }
  return leaf;
}

LeafCacheStats CertificateAuthority::cacheStats() const {
  std::lock_guard lock(impl_->mu);
  LeafCacheStats s = impl_->stats;
  s.size = impl_->lru.size();
  return s;
}

std::string CertificateAuthority::mergedBundle(std::string_view extra_pem,
                                               const std::filesystem::path& system_bundle) {
  std::ifstream in(system_bundle);
  std::ostringstream ss;
  if (in) ss << in.rdbuf();
  std::string out = ss.str();
  if (!out.empty() && out.back() != '\n') out += '\n';
  out += "# sluice execution CA\n";
  out += extra_pem;
  return out;
}

}  // namespace sluice::proxy
