// A blocking test client for the proxy: plain HTTP (absolute-form), CONNECT, then a TLS
// client handshake inside the tunnel (OpenSSL, with a chosen SNI and hostname check) and
// HTTP/1.1 requests over it. Every read is bounded by SO_RCVTIMEO; responses are parsed with
// Beast's parser. Every byte the client receives is appended to a transcript so tests can
// prove a secret never reached the client.
#pragma once

#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace sluice::tls_testing {

struct HttpResponse {
  int status = 0;                              // 0: nothing parseable arrived
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

class ProxyClient {
 public:
  /// Connects to 127.0.0.1:proxy_port. `transcript` (may be null) receives every byte read.
  explicit ProxyClient(std::uint16_t proxy_port, std::string* transcript = nullptr,
                       std::chrono::milliseconds timeout = std::chrono::seconds(5));
  ~ProxyClient();
  ProxyClient(const ProxyClient&) = delete;
  ProxyClient& operator=(const ProxyClient&) = delete;

  bool ok() const { return fd_ >= 0; }

  /// Sends CONNECT authority and reads the answer (only the head for a 2xx).
  HttpResponse connect(const std::string& authority);

  /// TLS client handshake over the tunnel. `sni` "" sends none; the certificate must chain
  /// to `trusted` and name `verify_host`. On failure `error` says why.
  bool handshake(X509* trusted, const std::string& sni, const std::string& verify_host,
                 std::string* error = nullptr);

  /// Writes bytes (over TLS once the handshake is done).
  bool send(std::string_view bytes);

  /// Reads one HTTP response; `connect_reply` stops after the head of a 2xx.
  HttpResponse readResponse(bool connect_reply = false);

  /// Reads exactly n bytes (fewer on EOF/timeout).
  std::string readN(std::size_t n);

  /// True when the peer closed (EOF, reset, TLS alert) within the timeout.
  bool waitClosed();

  /// ALPN protocol the server selected ("" if none).
  std::string alpn() const;

  /// The cipher suite the handshake settled on ("" before one), as OpenSSL names it.
  std::string cipher() const;

  /// Resumable sessions (TLS 1.3: tickets) the server has sent so far, as read.
  int sessionsReceived() const { return sessions_; }

 private:
  // Appends more bytes to buf_; false on EOF, error or timeout.
  bool fill();

  int fd_ = -1;
  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;
  std::string buf_;
  bool timed_out_ = false;
  int sessions_ = 0;
  std::string* transcript_;
};

/// "METHOD target HTTP/1.1" + Host + extra header lines ("Name: v\r\n"...) + body.
std::string request(const std::string& method, const std::string& target, const std::string& host,
                    const std::string& extra = "", const std::string& body = "");

}  // namespace sluice::tls_testing
