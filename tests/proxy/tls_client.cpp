// The blocking proxy client: sockets with receive timeouts, OpenSSL for TLS, Beast's parser.
#include "tls_client.hpp"

// clang-format off
#include <utility>  // before Asio/Beast: asio#944
// clang-format on

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <cerrno>

namespace sluice::tls_testing {

namespace http = boost::beast::http;

ProxyClient::ProxyClient(std::uint16_t proxy_port, std::string* transcript,
                         std::chrono::milliseconds timeout)
    : transcript_(transcript) {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) return;
  // Every blocking read and write gives up after `timeout` (tests never hang).
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
  ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(proxy_port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

ProxyClient::~ProxyClient() {
  if (ssl_) SSL_free(ssl_);
  if (ctx_) SSL_CTX_free(ctx_);
  if (fd_ >= 0) ::close(fd_);
}

HttpResponse ProxyClient::connect(const std::string& authority) {
  send("CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority + "\r\n\r\n");
  return readResponse(true);
}

bool ProxyClient::handshake(X509* trusted, const std::string& sni, const std::string& verify_host,
                            std::string* error) {
  ctx_ = SSL_CTX_new(TLS_client_method());
  SSL_CTX_set_min_proto_version(ctx_, TLS1_2_VERSION);
  X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx_), trusted);
  SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER, nullptr);
  static const unsigned char kAlpn[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  SSL_CTX_set_alpn_protos(ctx_, kAlpn, sizeof kAlpn);
  // Counts the sessions the server hands out (kept nowhere: this client never resumes).
  SSL_CTX_set_session_cache_mode(ctx_, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
  SSL_CTX_sess_set_new_cb(ctx_, [](SSL* ssl, SSL_SESSION*) {
    ++static_cast<ProxyClient*>(SSL_get_app_data(ssl))->sessions_;
    return 0;
  });
  ssl_ = SSL_new(ctx_);
  SSL_set_app_data(ssl_, this);
  if (!sni.empty()) SSL_set_tlsext_host_name(ssl_, sni.c_str());
  unsigned char addr[16];
  if (inet_pton(AF_INET, verify_host.c_str(), addr) == 1 ||
      inet_pton(AF_INET6, verify_host.c_str(), addr) == 1) {
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl_), verify_host.c_str());
  } else {
    SSL_set1_host(ssl_, verify_host.c_str());
  }
  SSL_set_fd(ssl_, fd_);
  // Bytes already read past the CONNECT reply would belong to TLS; the proxy sends none.
  ERR_clear_error();
  int rc = SSL_connect(ssl_);
  if (rc == 1) return true;
  if (error) {
    long v = SSL_get_verify_result(ssl_);
    char buf[256];
    unsigned long e = ERR_peek_last_error();
    ERR_error_string_n(e, buf, sizeof buf);
    *error = std::string("SSL_connect failed: ") + buf +
             (v != X509_V_OK ? std::string("; verify: ") + X509_verify_cert_error_string(v) : "");
  }
  ERR_clear_error();
  SSL_free(ssl_);
  ssl_ = nullptr;
  return false;
}

bool ProxyClient::send(std::string_view bytes) {
  if (fd_ < 0) return false;
  std::size_t off = 0;
  while (off < bytes.size()) {
    if (ssl_) {
      int n = SSL_write(ssl_, bytes.data() + off, static_cast<int>(bytes.size() - off));
      if (n <= 0) return false;
      off += static_cast<std::size_t>(n);
    } else {
      ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<std::size_t>(n);
    }
  }
  return true;
}

bool ProxyClient::fill() {
  if (fd_ < 0) return false;
  char tmp[16384];
  if (ssl_) {
    int n = SSL_read(ssl_, tmp, sizeof tmp);
    if (n <= 0) {
      // SO_RCVTIMEO expiring surfaces as WANT_READ on a blocking socket.
      timed_out_ = SSL_get_error(ssl_, n) == SSL_ERROR_WANT_READ;
      ERR_clear_error();
      return false;
    }
    buf_.append(tmp, static_cast<std::size_t>(n));
    if (transcript_) transcript_->append(tmp, static_cast<std::size_t>(n));
    return true;
  }
  ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
  if (n <= 0) {
    timed_out_ = n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
    return false;
  }
  buf_.append(tmp, static_cast<std::size_t>(n));
  if (transcript_) transcript_->append(tmp, static_cast<std::size_t>(n));
  return true;
}

HttpResponse ProxyClient::readResponse(bool connect_reply) {
  HttpResponse out;
  http::response_parser<http::string_body> p;
  p.body_limit(64 << 20);
  p.eager(false);
  boost::beast::error_code ec;
  bool eof = false;
  auto feed = [&](bool until_done) {
    for (int i = 0; i < 100000; ++i) {
      if (until_done ? p.is_done() : p.is_header_done()) return true;
      if (!buf_.empty()) {
        std::size_t n = p.put(boost::asio::buffer(buf_), ec);
        buf_.erase(0, n);
        if (ec == http::error::need_more) {
          ec = {};
        } else if (ec) {
          return false;
        } else if (n > 0) {
          continue;
        }
      }
      if (until_done ? p.is_done() : p.is_header_done()) return true;
      if (!fill()) {
        eof = true;
        if (!p.got_some()) return false;  // nothing arrived: no response at all
        p.put_eof(ec);
        return until_done ? p.is_done() : p.is_header_done();
      }
    }
    return false;
  };
  if (!feed(false)) return out;
  const auto& msg = p.get();
  out.status = static_cast<int>(msg.result_int());
  for (const auto& f : msg) {
    std::string name(f.name_string());
    for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    auto& slot = out.headers[name];
    slot += (slot.empty() ? "" : ", ") + std::string(f.value());
  }
  if (connect_reply && out.status / 100 == 2) return out;
  if (out.status == 101) return out;
  p.eager(true);
  if (!eof) feed(true);
  out.body = p.get().body();
  return out;
}

std::string ProxyClient::readN(std::size_t n) {
  for (int i = 0; i < 10000 && buf_.size() < n; ++i) {
    if (!fill()) break;
  }
  std::string out = buf_.substr(0, std::min(n, buf_.size()));
  buf_.erase(0, out.size());
  return out;
}

bool ProxyClient::waitClosed() {
  for (int i = 0; i < 1000; ++i) {
    if (!fill()) return !timed_out_;  // a timeout is not a close
  }
  return false;
}

std::string ProxyClient::alpn() const {
  if (!ssl_) return "";
  const unsigned char* data = nullptr;
  unsigned int len = 0;
  SSL_get0_alpn_selected(ssl_, &data, &len);
  return std::string(reinterpret_cast<const char*>(data), len);
}

std::string ProxyClient::cipher() const { return ssl_ ? SSL_get_cipher_name(ssl_) : ""; }

std::string request(const std::string& method, const std::string& target, const std::string& host,
                    const std::string& extra, const std::string& body) {
  std::string r = method + " " + target + " HTTP/1.1\r\nHost: " + host + "\r\n" + extra;
  if (!body.empty() || method == "POST" || method == "PUT") {
    r += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  }
  return r + "\r\n" + body;
}

}  // namespace sluice::tls_testing
