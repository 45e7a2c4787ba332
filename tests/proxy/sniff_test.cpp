// Sniffing the start of a byte stream (proxy/src/sniff.hpp): TLS, HTTP or other; the SNI of a
// real ClientHello, whole, truncated, without SNI and mangled; the Host of an HTTP head.
#include "sniff.hpp"

#include <gtest/gtest.h>
#include <openssl/ssl.h>

#include <random>
#include <string>

namespace sluice::proxy {
namespace {

// The first flight of a real TLS client (OpenSSL) with SNI `name` ("" = none).
std::string clientHello(const std::string& name) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL* ssl = SSL_new(ctx);
  BIO* rbio = BIO_new(BIO_s_mem());
  BIO* wbio = BIO_new(BIO_s_mem());
  SSL_set_bio(ssl, rbio, wbio);
  if (!name.empty()) SSL_set_tlsext_host_name(ssl, name.c_str());
  SSL_connect(ssl);  // wants to read: the ClientHello is in wbio
  char* data = nullptr;
  long n = BIO_get_mem_data(wbio, &data);
  std::string out(data, static_cast<std::size_t>(n));
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  return out;
}

TEST(Sniff, SniOfARealClientHello) {
  auto hello = clientHello("Upstream.Test");
  auto found = sniOf(hello);
  EXPECT_EQ(found.status, Peeked::kFound);
  EXPECT_EQ(found.name, "upstream.test");
  // Every prefix is "more", never a wrong answer.
  for (std::size_t n = 0; n < hello.size(); ++n)
    EXPECT_EQ(sniOf(hello.substr(0, n)).status, Peeked::kMore) << n;
  EXPECT_EQ(sniOf(clientHello("")).status, Peeked::kAbsent);
}

TEST(Sniff, SniParserSurvivesHostileBytes) {
  const auto hello = clientHello("a.example");
  std::mt19937 rng(20261123);
  for (int i = 0; i < 20000; ++i) {
    std::string b = hello;
    for (int k = 0; k < 4; ++k) b[rng() % b.size()] = static_cast<char>(rng());
    auto r = sniOf(b);  // must not crash or read out of bounds (ASan builds check)
    if (r.status == Peeked::kFound) {
      EXPECT_LE(r.name.size(), 253u);
    }
  }
  EXPECT_EQ(sniOf(std::string("\x16\x03\x01\xff\xff", 5)).status, Peeked::kAbsent);
  EXPECT_EQ(sniOf("GET / HTTP/1.1\r\n").status, Peeked::kAbsent);
}

TEST(Sniff, HostOfAnHttpHead) {
  EXPECT_EQ(httpHostOf("GET / HTTP/1.1\r\nHost: Upstream.Test:8080\r\n\r\n").name, "upstream.test");
  EXPECT_EQ(httpHostOf("GET / HTTP/1.1\r\nhost:[::1]:80\r\n\r\n").name, "::1");
  EXPECT_EQ(httpHostOf("GET / HTTP/1.1\r\nHost: a\r\n").status, Peeked::kMore);
  EXPECT_EQ(httpHostOf("GET / HTTP/1.1\r\nX: y\r\n\r\n").status, Peeked::kAbsent);
}

TEST(Sniff, ARealClientHelloIsTlsFromItsSecondByte) {
  const auto hello = clientHello("upstream.test");
  EXPECT_EQ(classifyOpening(""), Opening::kMore);
  EXPECT_EQ(classifyOpening(hello.substr(0, 1)), Opening::kMore) << "one byte cannot tell";
  for (std::size_t n = 2; n <= hello.size(); n += 7)
    EXPECT_EQ(classifyOpening(hello.substr(0, n)), Opening::kTls) << n;
}

TEST(Sniff, AHandshakeByteWithoutTlsVersionIsOther) {
  EXPECT_EQ(classifyOpening(std::string("\x16\x02\x00", 3)), Opening::kOther);
  EXPECT_EQ(classifyOpening(std::string("\x16\x00", 2)), Opening::kOther);
}

TEST(Sniff, AnHttpRequestLineIsHttpOnceItsMethodEnds) {
  EXPECT_EQ(classifyOpening("GET / HTTP/1.1\r\nHost: a\r\n\r\n"), Opening::kHttp);
  EXPECT_EQ(classifyOpening("M-SEARCH * HTTP/1.1\r\n"), Opening::kHttp);
  EXPECT_EQ(classifyOpening("GE"), Opening::kMore) << "the method may go on";
  EXPECT_EQ(classifyOpening("POST"), Opening::kMore);
}

TEST(Sniff, GarbageIsOther) {
  EXPECT_EQ(classifyOpening(" GET / HTTP/1.1"), Opening::kOther) << "no method before the space";
  EXPECT_EQ(classifyOpening("SSH-2.0-OpenSSH_9.6\r\n"), Opening::kOther);
  EXPECT_EQ(classifyOpening(std::string("\x00\x01\x02", 3)), Opening::kOther);
  EXPECT_EQ(classifyOpening(std::string(24, 'A')), Opening::kOther) << "no method is that long";
  EXPECT_EQ(classifyOpening(std::string(23, 'A')), Opening::kMore);
}

TEST(Sniff, ATruncatedOrMangledClientHelloNamesNothing) {
  const auto hello = clientHello("upstream.test");
  // The record header promises more than arrived: wait for it.
  EXPECT_EQ(sniOf(hello.substr(0, hello.size() - 1)).status, Peeked::kMore);
  // A record longer than TLS allows: give up rather than wait.
  EXPECT_EQ(sniOf(std::string("\x16\x03\x01\x40\x01", 5) + std::string(64, 'x')).status,
            Peeked::kAbsent);
  // A handshake record that is not a ClientHello (type 2, ServerHello).
  std::string server_hello = hello;
  server_hello[5] = 2;
  EXPECT_EQ(sniOf(server_hello).status, Peeked::kAbsent);
  EXPECT_EQ(sniOf(std::string(64, '\x00')).status, Peeked::kAbsent);
}

TEST(Sniff, AnHttpHeadWithoutHostNamesNothing) {
  EXPECT_EQ(httpHostOf("GET / HTTP/1.0\r\n\r\n").status, Peeked::kAbsent);
  EXPECT_EQ(httpHostOf("GET / HTTP/1.1\r\nHost:\r\n\r\n").status, Peeked::kAbsent);
  EXPECT_EQ(httpHostOf("GET / HTTP/1.1\r\nHost: [::1\r\n\r\n").status, Peeked::kAbsent);
  EXPECT_EQ(httpHostOf("GET / HTTP/1.1\r\nX-Host: a.test\r\n\r\n").status, Peeked::kAbsent);
  EXPECT_EQ(httpHostOf("GET / HTTP/1.1\r\n" + std::string(70000, 'x')).status, Peeked::kAbsent)
      << "a head that never ends";
  const auto found = httpHostOf("GET / HTTP/1.1\r\nhOsT: \tA.Test.\t\r\n\r\n");
  EXPECT_EQ(found.status, Peeked::kFound);
  EXPECT_EQ(found.name, "a.test");
}

}  // namespace
}  // namespace sluice::proxy
