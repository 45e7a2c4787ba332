// Test PKI (OpenSSL X509 APIs) and the loopback HTTPS upstream (Beast).
#include "https_upstream.hpp"

#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <strings.h>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/beast/websocket/ssl.hpp>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace sluice::tls_testing {

namespace beast = boost::beast;
namespace http = boost::beast::http;
namespace websocket = boost::beast::websocket;
using tcp = net::ip::tcp;
using ErrorCode = boost::system::error_code;

namespace {

EVP_PKEY* newKey() {
  EVP_PKEY* k = EVP_EC_gen("P-256");
  if (!k) throw std::runtime_error("EVP_EC_gen failed");
  return k;
}

void addExt(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX v3;
  X509V3_set_ctx(&v3, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &v3, nid, value);
  if (!ext) throw std::runtime_error("bad extension");
  X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
}

// Issuer null = self-signed.
X509* makeCert(EVP_PKEY* key, const std::string& cn, X509* issuer, EVP_PKEY* issuer_key, bool is_ca,
               const std::vector<std::string>& names, long not_before_s, long not_after_s) {
  X509* c = X509_new();
  X509_set_version(c, 2);
  unsigned char serial[16];
  RAND_bytes(serial, sizeof serial);
  serial[0] &= 0x7f;
  BIGNUM* bn = BN_bin2bn(serial, sizeof serial, nullptr);
  BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(c));
  BN_free(bn);
  X509_gmtime_adj(X509_getm_notBefore(c), not_before_s);
  X509_gmtime_adj(X509_getm_notAfter(c), not_after_s);
  X509_set_pubkey(c, key);
  X509_NAME* name = X509_get_subject_name(c);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509_set_issuer_name(c, issuer ? X509_get_subject_name(issuer) : name);
  X509* ext_issuer = issuer ? issuer : c;
  if (is_ca) {
    addExt(c, ext_issuer, NID_basic_constraints, "critical,CA:TRUE");
    addExt(c, ext_issuer, NID_key_usage, "critical,keyCertSign,cRLSign");
    addExt(c, ext_issuer, NID_subject_key_identifier, "hash");
  } else {
    addExt(c, ext_issuer, NID_basic_constraints, "critical,CA:FALSE");
    addExt(c, ext_issuer, NID_key_usage, "critical,digitalSignature");
    addExt(c, ext_issuer, NID_ext_key_usage, "serverAuth");
    addExt(c, ext_issuer, NID_subject_key_identifier, "hash");
    addExt(c, ext_issuer, NID_authority_key_identifier, "keyid");
    std::string san;
    for (const auto& n : names) {
      // "IP:a.b.c.d" is an address SAN; anything else a DNS name.
      san += (san.empty() ? "" : ",") + (n.rfind("IP:", 0) == 0 ? n : "DNS:" + n);
    }
    if (!san.empty()) addExt(c, ext_issuer, NID_subject_alt_name, san.c_str());
  }
  X509_sign(c, issuer_key ? issuer_key : key, EVP_sha256());
  return c;
}

std::string certPem(X509* c) {
  BIO* b = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(b, c);
  char* data = nullptr;
  long n = BIO_get_mem_data(b, &data);
  std::string out(data, static_cast<std::size_t>(n));
  BIO_free(b);
  return out;
}

std::string keyPem(EVP_PKEY* k) {
  BIO* b = BIO_new(BIO_s_mem());
  PEM_write_bio_PrivateKey(b, k, nullptr, nullptr, 0, nullptr, nullptr);
  char* data = nullptr;
  long n = BIO_get_mem_data(b, &data);
  std::string out(data, static_cast<std::size_t>(n));
  BIO_free(b);
  return out;
}

nlohmann::json echoOf(const ReceivedRequest& r) {
  nlohmann::json headers = nlohmann::json::array();
  for (const auto& [name, value] : r.headers) {
    headers.push_back({{"name", name}, {"sha256", sha256Hex(value)}});
  }
  return {{"method", r.method},
          {"target_sha256", sha256Hex(r.target)},  // a placeholder may be swapped in it
          {"sni", r.sni},
          {"headers", headers},
          {"body_bytes", r.body.size()}};
}

// Echoes WebSocket messages until the peer closes.
net::awaitable<void> serveWebSocket(beast::ssl_stream<beast::tcp_stream> stream,
                                    http::request<http::string_body> req,
                                    HttpsUpstream::State* state) {
  beast::get_lowest_layer(stream).expires_never();
  websocket::stream<beast::ssl_stream<beast::tcp_stream>> ws(std::move(stream));
  ws.set_option(websocket::stream_base::timeout::suggested(beast::role_type::server));
  ErrorCode ec;
  co_await ws.async_accept(req, net::redirect_error(net::use_awaitable, ec));
  if (ec) co_return;
  for (int i = 0; i < 1000; ++i) {
    beast::flat_buffer buf;
    co_await ws.async_read(buf, net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return;
    state->ws_messages.fetch_add(1);
    ws.text(ws.got_text());
    std::string reply = "echo:" + beast::buffers_to_string(buf.data());
    co_await ws.async_write(net::buffer(reply), net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return;
  }
}

net::awaitable<void> holdUntilReleased(HttpsUpstream::State* state) {
  state->held.fetch_add(1);
  net::steady_timer t(co_await net::this_coro::executor);
  while (!state->released) {
    t.expires_after(std::chrono::milliseconds(10));
    co_await t.async_wait(net::use_awaitable);
  }
  state->held.fetch_sub(1);
}

// Serves requests on one connection (TLS or plain) until the peer closes; returns the
// upgrade request when the client asked for a WebSocket on "/ws".
template <typename Stream>
net::awaitable<std::optional<http::request<http::string_body>>> serveRequests(
    Stream& stream, HttpsUpstream::State* state, const std::string& sni) {
  beast::flat_buffer buf;
  for (int i = 0; i < 10000; ++i) {
    ErrorCode ec;
    http::request_parser<http::string_body> parser;
    parser.body_limit(64 << 20);  // the default (1 MiB) is below what the bulk tests send
    beast::get_lowest_layer(stream).expires_after(std::chrono::seconds(30));
    co_await http::async_read(stream, buf, parser, net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return std::nullopt;
    http::request<http::string_body> req = parser.release();
    ReceivedRequest r;
    r.method = std::string(req.method_string());
    r.target = std::string(req.target());
    for (const auto& f : req) r.headers.emplace_back(f.name_string(), f.value());
    r.body = req.body();
    r.sni = sni;
    {
      std::lock_guard lock(state->mu);
      state->requests.push_back(r);
    }
    if (websocket::is_upgrade(req) && r.target == "/ws") co_return req;
    if (r.target.starts_with("/v1/hold")) co_await holdUntilReleased(state);
    if (r.target == "/v1/trailers") {
      // Chunked with a trailer section, one trailer quoting the credential it received.
      const std::string raw =
          "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n"
          "Trailer: x-checksum, x-reflected-authorization\r\n\r\n5\r\nhello\r\n0\r\n"
          "x-checksum: sha256-2cf24dba\r\nx-reflected-authorization: " +
          std::string(req[http::field::authorization]) + "\r\n\r\n";
      co_await net::async_write(stream, net::buffer(raw),
                                net::redirect_error(net::use_awaitable, ec));
      if (ec || !req.keep_alive()) co_return std::nullopt;
      continue;
    }
    http::response<http::string_body> res{http::status::ok, req.version()};
    res.set(http::field::content_type, "application/json");
    if (r.target == "/v1/reflect") {
      // A careless upstream that quotes the credential it received in a response header.
      res.set("X-Reflected-Authorization", req[http::field::authorization]);
    }
    if (r.target.rfind("/v1/big/", 0) == 0) {
      res.set(http::field::content_type, "application/octet-stream");
      res.body() = std::string(std::stoul(r.target.substr(8)), 'b');
    } else {
      res.body() = echoOf(r).dump();
    }
    res.keep_alive(req.keep_alive());
    res.prepare_payload();
    co_await http::async_write(stream, res, net::redirect_error(net::use_awaitable, ec));
    if (ec || !req.keep_alive()) co_return std::nullopt;
    if (r.target == "/v1/close-later") {
      // Kept alive by the response, then closed while idle (an upstream's idle timeout).
      net::steady_timer t(stream.get_executor(), std::chrono::milliseconds(100));
      co_await t.async_wait(net::redirect_error(net::use_awaitable, ec));
      co_return std::nullopt;
    }
    if (r.target == "/v1/stray") {
      // A second response nobody asked for, after the one that was.
      static constexpr std::string_view kStray =
          "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nstray";
      co_await net::async_write(stream, net::buffer(kStray.data(), kStray.size()),
                                net::redirect_error(net::use_awaitable, ec));
      if (ec) co_return std::nullopt;
    }
  }
  co_return std::nullopt;
}

net::awaitable<void> serveTls(tcp::socket sock, net::ssl::context* ctx,
                              HttpsUpstream::State* state) {
  beast::ssl_stream<beast::tcp_stream> stream(beast::tcp_stream(std::move(sock)), *ctx);
  ErrorCode ec;
  beast::get_lowest_layer(stream).expires_after(std::chrono::seconds(10));
  co_await stream.async_handshake(net::ssl::stream_base::server,
                                  net::redirect_error(net::use_awaitable, ec));
  if (ec) co_return;
  state->handshakes.fetch_add(1);
  if (SSL_session_reused(stream.native_handle())) state->resumed.fetch_add(1);
  {
    std::lock_guard lock(state->mu);
    state->last_cipher = SSL_get_cipher_name(stream.native_handle());
  }
  const char* sni = SSL_get_servername(stream.native_handle(), TLSEXT_NAMETYPE_host_name);
  auto upgrade = co_await serveRequests(stream, state, sni ? sni : "");
  if (upgrade) {
    co_await serveWebSocket(std::move(stream), std::move(*upgrade), state);
    co_return;
  }
  state->ended.fetch_add(1);
  beast::get_lowest_layer(stream).expires_after(std::chrono::seconds(2));
  co_await stream.async_shutdown(net::redirect_error(net::use_awaitable, ec));
}

net::awaitable<void> servePlain(tcp::socket sock, HttpsUpstream::State* state) {
  beast::tcp_stream stream(std::move(sock));
  co_await serveRequests(stream, state, "");
  ErrorCode ec;
  stream.socket().shutdown(tcp::socket::shutdown_send, ec);
}

net::awaitable<void> acceptLoop(tcp::acceptor* acc, net::ssl::context* ctx,
                                HttpsUpstream::State* state) {
  for (;;) {
    ErrorCode ec;
    tcp::socket s = co_await acc->async_accept(net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return;
    state->accepted.fetch_add(1);
    auto ex = s.get_executor();
    if (ctx) {
      net::co_spawn(ex, serveTls(std::move(s), ctx, state), net::detached);
    } else {
      net::co_spawn(ex, servePlain(std::move(s), state), net::detached);
    }
  }
}

}  // namespace

std::string sha256Hex(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(data.data(), data.size(), md, &n, EVP_sha256(), nullptr);
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < n; ++i) {
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 15];
  }
  return out;
}

TestPki::TestPki() {
  ca_key_ = newKey();
  ca_cert_ =
      makeCert(ca_key_, "sluice upstream test CA", nullptr, nullptr, true, {}, -3600, 7 * 86400);
  rogue_key_ = newKey();
  rogue_cert_ =
      makeCert(rogue_key_, "rogue CA nobody trusts", nullptr, nullptr, true, {}, -3600, 7 * 86400);
}

TestPki::~TestPki() {
  X509_free(ca_cert_);
  EVP_PKEY_free(ca_key_);
  X509_free(rogue_cert_);
  EVP_PKEY_free(rogue_key_);
}

std::string TestPki::caPem() const { return certPem(ca_cert_); }

ServerCert TestPki::leaf(const std::vector<std::string>& names, std::chrono::seconds not_before,
                         std::chrono::seconds not_after, bool rogue) const {
  EVP_PKEY* key = newKey();
  X509* cert =
      makeCert(key, names.empty() ? "leaf" : names.front(), rogue ? rogue_cert_ : ca_cert_,
               rogue ? rogue_key_ : ca_key_, false, names, static_cast<long>(not_before.count()),
               static_cast<long>(not_after.count()));
  ServerCert out{certPem(cert), keyPem(key)};
  X509_free(cert);
  EVP_PKEY_free(key);
  return out;
}

std::vector<std::string> ReceivedRequest::values(std::string_view name) const {
  std::vector<std::string> out;
  for (const auto& [n, v] : headers) {
    if (n.size() == name.size() && strncasecmp(n.data(), name.data(), n.size()) == 0) {
      out.push_back(v);
    }
  }
  return out;
}

std::string ReceivedRequest::header(std::string_view name) const {
  auto v = values(name);
  return v.empty() ? "" : v.front();
}

HttpsUpstream::HttpsUpstream(std::optional<ServerCert> cert) : acceptor_(ioc_) {
  if (cert) {
    ctx_.emplace(net::ssl::context::tls_server);
    ctx_->set_options(net::ssl::context::default_workarounds | net::ssl::context::no_sslv2 |
                      net::ssl::context::no_sslv3 | net::ssl::context::no_tlsv1 |
                      net::ssl::context::no_tlsv1_1);
    ctx_->use_certificate_chain(net::buffer(cert->cert_pem));
    ctx_->use_private_key(net::buffer(cert->key_pem), net::ssl::context::pem);
  }
  tcp::endpoint ep(net::ip::make_address("127.0.0.1"), 0);
  acceptor_.open(ep.protocol());
  acceptor_.set_option(net::socket_base::reuse_address(true));
  acceptor_.bind(ep);
  acceptor_.listen(1024);
  port_ = acceptor_.local_endpoint().port();
  net::co_spawn(ioc_, acceptLoop(&acceptor_, ctx_ ? &*ctx_ : nullptr, &state_), net::detached);
  thread_ = std::thread([this] { ioc_.run(); });
}

HttpsUpstream::~HttpsUpstream() {
  ioc_.stop();
  if (thread_.joinable()) thread_.join();
}

std::vector<ReceivedRequest> HttpsUpstream::requests() {
  std::lock_guard lock(state_.mu);
  return state_.requests;
}

}  // namespace sluice::tls_testing
