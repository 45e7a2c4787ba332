// The OTLP/HTTP transport (otlp_http.hpp).
#include "otlp_http.hpp"

#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <ctime>
#include <type_traits>

namespace sluice::serve::detail {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = boost::asio::ssl;
using tcp = boost::asio::ip::tcp;
using Request = http::request<http::string_body>;
using Response = http::response<http::string_body>;

// How long one POST may take (connect, TLS, request and reply); a slower collector fails it.
constexpr std::chrono::seconds kPostTimeout{2};
// A Retry-After beyond this is cut to it: a collector cannot park the exporter for hours.
constexpr std::chrono::seconds kMaxRetryAfter{30};
constexpr std::chrono::milliseconds kFirstBackoff{250};
constexpr std::chrono::milliseconds kMaxBackoff{8000};

base::Error badEndpoint(const std::string& url) {
  return base::Error{base::Code::kInvalidArgument,
                     "--otlp-endpoint '" + url + "' is not http[s]://HOST[:PORT][/PATH]"};
}

/// Connects, shakes hands (TLS), sends `req` and reads `res` within kPostTimeout. Asynchronous
/// on its own io_context because Beast's deadline (expires_after) applies to asynchronous
/// operations only: a collector that accepts and never answers costs kPostTimeout, not forever.
template <typename Stream>
beast::error_code exchange(boost::asio::io_context& io, Stream& stream,
                           const tcp::resolver::results_type& endpoints, Request& req,
                           Response& res) {
  beast::error_code ec;
  beast::flat_buffer buf;
  auto send = [&] {
    http::async_write(stream, req, [&](beast::error_code e, std::size_t) {
      if (e) return void(ec = e);
      http::async_read(stream, buf, res, [&](beast::error_code e2, std::size_t) { ec = e2; });
    });
  };
  beast::get_lowest_layer(stream).expires_after(kPostTimeout);
  beast::get_lowest_layer(stream).async_connect(
      endpoints, [&](beast::error_code e, const tcp::endpoint&) {
        if (e) return void(ec = e);
        if constexpr (std::is_same_v<Stream, beast::tcp_stream>) {
          send();
        } else {
          stream.async_handshake(ssl::stream_base::client, [&](beast::error_code e2) {
            if (e2) return void(ec = e2);
            send();
          });
        }
      });
  io.run();
  return ec;
}

/// The certificate must name `host`: its IP address (an IP SAN) or its DNS name, which also
/// goes out as SNI.
bool expectHost(SSL* ssl, const std::string& host) {
  boost::system::error_code ec;
  boost::asio::ip::make_address(host, ec);
  if (!ec) return X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host.c_str()) == 1;
  return SSL_set1_host(ssl, host.c_str()) == 1 && SSL_set_tlsext_host_name(ssl, host.c_str()) == 1;
}

}  // namespace

base::Result<OtlpTarget> parseOtlpEndpoint(const std::string& url) {
  OtlpTarget t;
  t.tls = url.rfind("https://", 0) == 0;
  if (!t.tls && url.rfind("http://", 0) != 0) return std::unexpected(badEndpoint(url));
  std::string rest = url.substr(t.tls ? 8 : 7);
  auto slash = rest.find('/');
  if (slash != std::string::npos) {
    t.prefix = rest.substr(slash);
    rest.resize(slash);
  }
  while (!t.prefix.empty() && t.prefix.back() == '/') t.prefix.pop_back();
  // USER:PASSWORD@ would go out nowhere (there is no Basic auth) yet into every message that
  // names the collector; refused without echoing the URL, which holds the password.
  if (rest.find('@') != std::string::npos)
    return base::fail(base::Code::kInvalidArgument,
                      "--otlp-endpoint: credentials in the URL (USER:PASSWORD@) are not supported");
  auto colon = rest.rfind(':');
  bool v6 = !rest.empty() && rest.back() == ']';
  const bool no_port = colon == std::string::npos || v6;
  t.host = no_port ? rest : rest.substr(0, colon);
  t.port = no_port ? (t.tls ? "443" : "80") : rest.substr(colon + 1);
  if (t.host.size() >= 2 && t.host.front() == '[') t.host = t.host.substr(1, t.host.size() - 2);
  if (t.host.empty() || t.port.empty() ||
      t.port.find_first_not_of("0123456789") != std::string::npos)
    return std::unexpected(badEndpoint(url));
  return t;
}

OtlpClient::OtlpClient(OtlpTarget target) : target_(std::move(target)) {}

base::Result<std::unique_ptr<OtlpClient>> OtlpClient::make(OtlpTarget target,
                                                           const std::string& ca_file) {
  std::unique_ptr<OtlpClient> c(new OtlpClient(std::move(target)));
  if (!c->target_.tls) {
    if (!ca_file.empty())
      return base::fail(base::Code::kInvalidArgument, "--otlp-ca needs an https:// endpoint");
    return c;
  }
  auto& ctx = c->tls_.emplace(ssl::context::tls_client);
  SSL_CTX_set_min_proto_version(ctx.native_handle(), TLS1_2_VERSION);
  ctx.set_verify_mode(ssl::verify_peer);
  boost::system::error_code ec;
  if (ca_file.empty()) {
    ctx.set_default_verify_paths(ec);
  } else {
    ctx.load_verify_file(ca_file, ec);
  }
  if (ec)
    return base::fail(base::Code::kInvalidArgument,
                      (ca_file.empty() ? std::string("the system CAs") : "--otlp-ca " + ca_file) +
                          ": cannot load: " + ec.message());
  return c;
}

std::string OtlpClient::where() const {
  return (target_.tls ? "https://" : "http://") + target_.host + ":" + target_.port;
}

base::Result<OtlpReply> OtlpClient::post(const std::string& path, std::string body) {
  boost::asio::io_context io;
  beast::error_code ec;
  tcp::resolver resolver(io);
  auto endpoints = resolver.resolve(target_.host, target_.port, ec);
  if (ec) return base::fail(base::Code::kUnavailable, ec.message(), target_.host);
  Request req{http::verb::post, target_.prefix + path, 11};
  req.set(http::field::host, target_.host + ":" + target_.port);
  req.set(http::field::content_type, "application/json");
  req.body() = std::move(body);
  req.prepare_payload();
  Response res;
  if (!tls_) {
    beast::tcp_stream stream(io);
    ec = exchange(io, stream, endpoints, req, res);
    beast::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  } else {
    // No TLS close_notify afterwards: the reply is in, and closing the socket is enough.
    beast::ssl_stream<beast::tcp_stream> stream(io, *tls_);
    if (!expectHost(stream.native_handle(), target_.host))
      return base::fail(base::Code::kInvalidArgument, "cannot check the certificate's name",
                        target_.host);
    ec = exchange(io, stream, endpoints, req, res);
  }
  if (ec) return base::fail(base::Code::kUnavailable, ec.message(), where());
  OtlpReply reply{static_cast<int>(res.result_int()), std::nullopt};
  if (auto it = res.find(http::field::retry_after); it != res.end())
    reply.retry_after = parseRetryAfter(std::string(it->value()));
  return reply;
}

bool otlpRetryable(const base::Result<OtlpReply>& reply) {
  if (!reply) return true;
  return reply->status == 429 || reply->status / 100 == 5;
}

std::chrono::milliseconds otlpBackoff(int attempt, const base::Result<OtlpReply>& reply) {
  if (reply && reply->retry_after)
    return std::min<std::chrono::milliseconds>(*reply->retry_after, kMaxRetryAfter);
  auto wait = kFirstBackoff;
  for (int i = 1; i < attempt && wait < kMaxBackoff; ++i) wait *= 2;
  return std::min(wait, kMaxBackoff);
}

std::optional<std::chrono::seconds> parseRetryAfter(const std::string& value) {
  if (!value.empty() && value.find_first_not_of("0123456789") == std::string::npos)
    return std::chrono::seconds(std::stoll(value.substr(0, 9)));
  std::tm tm{};
  const char* end = ::strptime(value.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &tm);
  if (!end || *end != '\0') return std::nullopt;
  const auto at = std::chrono::system_clock::from_time_t(::timegm(&tm));
  const auto delta =
      std::chrono::duration_cast<std::chrono::seconds>(at - std::chrono::system_clock::now());
  return std::max(delta, std::chrono::seconds(0));
}

}  // namespace sluice::serve::detail
