// The inspection CA: leaves verify against it with hostname checks, the cache is bounded,
// and the long-lived CA's key file is 0600 and refused when others can read it.
#include "sluice/proxy/certificate_authority.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

namespace sluice::proxy {
namespace {

namespace fs = std::filesystem;

// Verifies `leaf` against `ca` as a TLS client would for `host`.
bool verifies(X509* ca, X509* leaf, const std::string& host, std::string* why = nullptr) {
  X509_STORE* store = X509_STORE_new();
  X509_STORE_add_cert(store, ca);
  X509_STORE_CTX* ctx = X509_STORE_CTX_new();
  X509_STORE_CTX_init(ctx, store, leaf, nullptr);
  X509_VERIFY_PARAM* param = X509_STORE_CTX_get0_param(ctx);
  X509_VERIFY_PARAM_set_purpose(param, X509_PURPOSE_SSL_SERVER);
  unsigned char buf[16];
  if (inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1) {
    X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str());
  } else {
    X509_VERIFY_PARAM_set1_host(param, host.c_str(), host.size());
  }
  bool ok = X509_verify_cert(ctx) == 1;
  if (!ok && why) *why = X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx));
  X509_STORE_CTX_free(ctx);
  X509_STORE_free(store);
  return ok;
}

TEST(CertificateAuthority, LeafVerifiesForItsHostOnly) {
  auto ca = CertificateAuthority::createEphemeral("test CA").value();
  auto leaf = ca->leafFor("api.example.com").value();
  std::string why;
  EXPECT_TRUE(verifies(ca->certificate(), leaf->certificate(), "api.example.com", &why)) << why;
  EXPECT_FALSE(verifies(ca->certificate(), leaf->certificate(), "evil.example.com"));
  EXPECT_FALSE(verifies(ca->certificate(), leaf->certificate(), "example.com"));
  // Another CA's leaf is not trusted.
  auto other = CertificateAuthority::createEphemeral("other").value();
  EXPECT_FALSE(verifies(ca->certificate(), other->leafFor("api.example.com").value()->certificate(),
                        "api.example.com"));
}

TEST(CertificateAuthority, IpLiteralLeafHasAnIpSan) {
  auto ca = CertificateAuthority::createEphemeral("test CA").value();
  auto leaf = ca->leafFor("127.0.0.1").value();
  std::string why;
  EXPECT_TRUE(verifies(ca->certificate(), leaf->certificate(), "127.0.0.1", &why)) << why;
}

TEST(CertificateAuthority, LeafIsNotACaAndNeverOutlivesTheCa) {
  auto ca = CertificateAuthority::createEphemeral("short", std::chrono::hours(1)).value();
  auto leaf = ca->leafFor("a.example").value();
  EXPECT_EQ(X509_check_ca(leaf->certificate()), 0);
  EXPECT_LE(ASN1_TIME_compare(X509_get0_notAfter(leaf->certificate()),
                              X509_get0_notAfter(ca->certificate())),
            0);
  // A leaf cannot sign further certificates (CA pathlen 0 and CA:FALSE).
  EXPECT_NE(X509_check_ca(ca->certificate()), 0);
}

TEST(CertificateAuthority, CacheReusesAndEvicts) {
  auto ca = CertificateAuthority::createEphemeral("cache", std::chrono::hours(1), 2).value();
  auto a1 = ca->leafFor("a.example").value();
  auto a2 = ca->leafFor("a.example").value();
  EXPECT_EQ(a1.get(), a2.get());
  ca->leafFor("b.example").value();
  ca->leafFor("c.example").value();  // evicts a (least recently used)
  auto s = ca->cacheStats();
  EXPECT_EQ(s.size, 2u);
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 3u);
  auto a3 = ca->leafFor("a.example").value();
  EXPECT_NE(a1.get(), a3.get());
}

class CaDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("sluice-ca-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(CaDir, InitWritesA0600KeyAndRefusesToOverwrite) {
  ASSERT_TRUE(CertificateAuthority::initDirectory(dir_));
  struct stat st {};
  ASSERT_EQ(::stat((dir_ / "ca.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto again = CertificateAuthority::initDirectory(dir_);
  ASSERT_FALSE(again);
  EXPECT_NE(again.error().find("refusing to overwrite"), std::string::npos) << again.error();
  auto ca = CertificateAuthority::loadDirectory(dir_);
  ASSERT_TRUE(ca) << ca.error();
  auto leaf = (*ca)->leafFor("svc.example").value();
  EXPECT_TRUE(verifies((*ca)->certificate(), leaf->certificate(), "svc.example"));
}

TEST_F(CaDir, LoadRefusesAKeyOthersCanRead) {
  ASSERT_TRUE(CertificateAuthority::initDirectory(dir_));
  ::chmod((dir_ / "ca.key").c_str(), 0644);
  auto ca = CertificateAuthority::loadDirectory(dir_);
  ASSERT_FALSE(ca);
  EXPECT_NE(ca.error().find("mode 0644"), std::string::npos) << ca.error();
}

TEST_F(CaDir, LoadNamesTheMissingFile) {
  auto ca = CertificateAuthority::loadDirectory(dir_);
  ASSERT_FALSE(ca);
  EXPECT_NE(ca.error().find("sluice ca init"), std::string::npos) << ca.error();
}

TEST(CertificateAuthority, MergedBundleAppendsTheCa) {
  auto ca = CertificateAuthority::createEphemeral("bundle").value();
  std::string bundle = CertificateAuthority::mergedBundle(ca->certificatePem());
  EXPECT_NE(bundle.find(ca->certificatePem()), std::string::npos);
  EXPECT_GT(bundle.size(), ca->certificatePem().size());  // the system bundle came first
}

}  // namespace
}  // namespace sluice::proxy
