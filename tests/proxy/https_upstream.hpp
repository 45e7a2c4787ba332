// Test PKI and a loopback HTTPS (or plain HTTP) upstream for the TLS inspection tests.
//
// TestPki makes a trusted test CA (its PEM goes to ProxyOptions::upstream_ca_files) and a
// rogue CA nobody trusts, and signs leaf certificates with chosen names and validity, so the
// tests can present an expired, a wrong-host and an unknown-CA certificate.
//
// HttpsUpstream (Beast + OpenSSL, one io_context thread, 127.0.0.1 port 0) records every
// request it receives (raw, for assertions) and answers with a JSON echo of the request whose
// target and header values are SHA-256 digests: a real API never reflects credentials, so a
// response the client sees must not carry the secret either, yet the client can still check what
// arrived.
// "/ws" with an Upgrade header becomes a WebSocket that echoes every message; "/v1/big/N"
// answers N bytes; "/v1/trailers" answers chunked with trailers (x-checksum, and
// x-reflected-authorization quoting the Authorization it got); "/v1/hold..." is answered only once
// releaseHeld() was called (held() counts the requests waiting), so a test can keep upstream
// connections busy; "/v1/close-later" keeps the connection alive, then closes it 100 ms later;
// "/v1/stray" is followed on the connection by a second response nobody asked for.
#pragma once

// clang-format off
#include <utility>  // before Asio: asio#944
// clang-format on

#include <openssl/evp.h>
#include <openssl/x509.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "sluice/proxy/certificate_authority.hpp"
#include "sluice/proxy/proxy.hpp"

namespace sluice::tls_testing {

namespace net = boost::asio;

/// A certificate chain and its private key, PEM.
struct ServerCert {
  std::string cert_pem;
  std::string key_pem;
};

class TestPki {
 public:
  TestPki();
  ~TestPki();
  TestPki(const TestPki&) = delete;
  TestPki& operator=(const TestPki&) = delete;

  /// The trusted test CA certificate (PEM).
  std::string caPem() const;

  /// A leaf with SANs `names` (DNS names; "IP:127.0.0.1" for an address), valid from
  /// now+not_before to now+not_after, signed by the trusted CA (or by the rogue CA). Only the
  /// leaf is in the chain.
  ServerCert leaf(const std::vector<std::string>& names,
                  std::chrono::seconds not_before = std::chrono::hours(-1),
                  std::chrono::seconds not_after = std::chrono::hours(24),
                  bool rogue = false) const;

 private:
  EVP_PKEY* ca_key_ = nullptr;
  X509* ca_cert_ = nullptr;
  EVP_PKEY* rogue_key_ = nullptr;
  X509* rogue_cert_ = nullptr;
};

/// One request as the upstream received it.
struct ReceivedRequest {
  std::string method;
  std::string target;
  std::vector<std::pair<std::string, std::string>> headers;  // as received, in order
  std::string body;
  std::string sni;  // server name the TLS client sent ("" if none / plain)

  /// Every value of header `name` (case-insensitive).
  std::vector<std::string> values(std::string_view name) const;
  /// The first value, or "".
  std::string header(std::string_view name) const;
};

class HttpsUpstream {
 public:
  /// TLS with `cert`; without it, plain HTTP.
  explicit HttpsUpstream(std::optional<ServerCert> cert);
  ~HttpsUpstream();
  HttpsUpstream(const HttpsUpstream&) = delete;
  HttpsUpstream& operator=(const HttpsUpstream&) = delete;

  std::uint16_t port() const { return port_; }

  struct State {
    std::atomic<int> accepted{0};
    std::atomic<int> handshakes{0};  // TLS handshakes completed
    std::atomic<int> resumed{0};     // of which resumed a session
    std::atomic<int> ended{0};       // TLS connections whose requests ended (closed, or failed)
    std::atomic<int> ws_messages{0};
    std::atomic<int> held{0};  // "/v1/hold" requests waiting for releaseHeld()
    std::atomic<bool> released{false};
    std::mutex mu;
    std::vector<ReceivedRequest> requests;
    std::string last_cipher;
  };
  int accepted() const { return state_.accepted.load(); }
  int handshakes() const { return state_.handshakes.load(); }
  int resumed() const { return state_.resumed.load(); }
  int ended() const { return state_.ended.load(); }
  /// The cipher suite of the last TLS handshake, as OpenSSL names it ("" before one).
  std::string lastCipher() {
    std::lock_guard lock(state_.mu);
    return state_.last_cipher;
  }
  int held() const { return state_.held.load(); }
  void releaseHeld() { state_.released = true; }
  std::vector<ReceivedRequest> requests();

 private:
  State state_;
  std::optional<net::ssl::context> ctx_;
  net::io_context ioc_;
  net::ip::tcp::acceptor acceptor_;
  std::uint16_t port_ = 0;
  std::thread thread_;
};

/// Lower-case hex SHA-256 (what the echo puts in place of header values).
std::string sha256Hex(std::string_view data);

/// A proxy that inspects with `ca` and trusts the test PKI's CA (`upstream_ca_file`), with
/// short timeouts so a failing test fails fast: the options the inspected-tunnel tests share.
inline proxy::ProxyOptions inspectingOptions(std::shared_ptr<proxy::CertificateAuthority> ca,
                                             const std::string& upstream_ca_file) {
  proxy::ProxyOptions o;
  o.threads = 2;
  o.header_timeout = std::chrono::milliseconds(5000);
  o.idle_timeout = std::chrono::milliseconds(30000);
  o.connect_timeout = std::chrono::milliseconds(2000);
  o.upstream_timeout = std::chrono::milliseconds(5000);
  o.drain_timeout = std::chrono::milliseconds(200);
  o.ca = std::move(ca);
  o.upstream_ca_files = {upstream_ca_file};
  return o;
}

}  // namespace sluice::tls_testing
