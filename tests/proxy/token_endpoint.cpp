// The loopback token endpoint and API of the minted-token tests (token_endpoint.hpp).
#include "token_endpoint.hpp"

#include <netinet/in.h>
#include <openssl/rand.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace sluice::tls_testing {

namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = net::ip::tcp;

namespace {

std::string randomHex(std::size_t bytes) {
  std::vector<unsigned char> b(bytes);
  RAND_bytes(b.data(), static_cast<int>(b.size()));
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (auto c : b) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

std::string base64Decode(std::string_view in) {
  std::string out(3 * (in.size() / 4) + 3, '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(in.data()),
                          static_cast<int>(in.size()));
  if (n < 0) return "";
  std::size_t pad = 0;
  for (auto it = in.rbegin(); it != in.rend() && *it == '='; ++it) ++pad;
  out.resize(static_cast<std::size_t>(n) - pad);
  return out;
}

// The value of form field `name` in an x-www-form-urlencoded body, decoded.
std::string formField(const std::string& body, const std::string& name) {
  std::size_t pos = 0;
  while (pos <= body.size()) {
    auto end = body.find('&', pos);
    if (end == std::string::npos) end = body.size();
    auto pair = body.substr(pos, end - pos);
    auto eq = pair.find('=');
    if (eq != std::string::npos && pair.substr(0, eq) == name) {
      std::string v;
      for (std::size_t i = eq + 1; i < pair.size(); ++i) {
        if (pair[i] == '+') {
          v += ' ';
        } else if (pair[i] == '%' && i + 2 < pair.size()) {
          v += static_cast<char>(std::stoi(pair.substr(i + 1, 2), nullptr, 16));
          i += 2;
        } else {
          v += pair[i];
        }
      }
      return v;
    }
    pos = end + 1;
  }
  return "";
}

bool verifyRs256(EVP_PKEY* key, const std::string& input, const std::string& sig) {
  EVP_MD_CTX* md = EVP_MD_CTX_new();
  bool ok =
      EVP_DigestVerifyInit(md, nullptr, EVP_sha256(), nullptr, key) == 1 &&
      EVP_DigestVerify(md, reinterpret_cast<const unsigned char*>(sig.data()), sig.size(),
                       reinterpret_cast<const unsigned char*>(input.data()), input.size()) == 1;
  EVP_MD_CTX_free(md);
  return ok;
}

}  // namespace

std::string base64UrlDecode(std::string_view in) {
  std::string s(in);
  for (auto& c : s) c = c == '-' ? '+' : c == '_' ? '/' : c;
  while (s.size() % 4) s += '=';
  return base64Decode(s);
}

TokenEndpoint::TokenEndpoint(ServerCert cert, TokenEndpointConfig config)
    : cert_(std::move(cert)), config_(std::move(config)) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::listen(listen_fd_, 64) != 0 ||
      ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    throw std::runtime_error("token endpoint: cannot listen");
  port_ = ntohs(a.sin_port);
  acceptor_ = std::thread([this] { acceptLoop(); });
}

TokenEndpoint::~TokenEndpoint() {
  stop_ = true;
  acceptor_.join();
  ::close(listen_fd_);
  for (auto& t : threads_) t.join();
}

std::vector<std::string> TokenEndpoint::issued() {
  std::lock_guard lock(mu_);
  return issued_;
}

std::vector<std::string> TokenEndpoint::apiAuthorizations() {
  std::lock_guard lock(mu_);
  return api_auth_;
}

void TokenEndpoint::acceptLoop() {
  while (!stop_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 50) != 1) continue;
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    timeval tv{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    std::lock_guard lock(mu_);
    threads_.emplace_back([this, fd] { serve(fd); });
  }
}

// One connection: TLS, then requests until the client closes (or 5 s of silence).
void TokenEndpoint::serve(int fd) {
  net::io_context ioc;
  net::ssl::context ctx(net::ssl::context::tls_server);
  ctx.use_certificate_chain(net::buffer(cert_.cert_pem));
  ctx.use_private_key(net::buffer(cert_.key_pem), net::ssl::context::pem);
  beast::ssl_stream<tcp::socket> s(tcp::socket(ioc, tcp::v4(), fd), ctx);
  beast::error_code ec;
  s.handshake(net::ssl::stream_base::server, ec);
  beast::flat_buffer buf;
  while (!ec && !stop_) {
    http::request<http::string_body> req;
    http::read(s, buf, req, ec);
    if (ec) break;
    int status = 200;
    std::string echo;
    std::string body =
        handle(std::string(req.method_string()), std::string(req.target()),
               std::string(req[http::field::authorization]), req.body(), status, echo);
    http::response<http::string_body> res{static_cast<http::status>(status), 11};
    res.set(http::field::content_type, "application/json");
    if (!echo.empty()) res.set("X-Echo-Authorization", echo);
    res.body() = body;
    res.keep_alive(req.keep_alive());
    res.prepare_payload();
    http::write(s, res, ec);
    if (!req.keep_alive()) break;
  }
  s.shutdown(ec);
}

std::string TokenEndpoint::handle(const std::string& method, const std::string& target,
                                  const std::string& authorization, const std::string& body,
                                  int& status, std::string& echo) {
  if (target == "/oauth/token" || target == "/google/token") {
    grants_++;
    if (delay_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_.load()));
    const bool ok =
        method == "POST" && (target == "/oauth/token" ? checkClientCredentials(authorization, body)
                                                      : checkJwtBearer(body));
    return grantAnswer(ok, status);
  }
  {
    std::lock_guard lock(mu_);
    api_auth_.push_back(authorization);
  }
  echo = authorization.empty() ? "-" : authorization;
  return nlohmann::json{{"path", target}, {"authorization_sha256", sha256Hex(authorization)}}
      .dump();
}

std::string TokenEndpoint::grantAnswer(bool ok, int& status) {
  if (failing_) {
    status = 500;
    return R"({"error":"temporarily_unavailable"})";
  }
  if (!ok) {
    bad_grants_++;
    status = 401;
    return R"({"error":"invalid_client"})";
  }
  std::string token;
  {
    std::lock_guard lock(mu_);
    token = "tok-" + std::to_string(issued_.size() + 1) + "-" + randomHex(16);
    issued_.push_back(token);
  }
  return nlohmann::json{
      {"access_token", token}, {"token_type", "Bearer"}, {"expires_in", expires_in_.load()}}
      .dump();
}

bool TokenEndpoint::checkClientCredentials(const std::string& authorization,
                                           const std::string& body) {
  if (authorization.rfind("Basic ", 0) != 0) return false;
  const std::string pair = base64Decode(authorization.substr(6));
  return pair == config_.client_id + ":" + config_.client_secret &&
         formField(body, "grant_type") == "client_credentials" &&
         formField(body, "scope") == config_.scope && formField(body, "client_secret").empty();
}

bool TokenEndpoint::checkJwtBearer(const std::string& body) {
  if (formField(body, "grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer") return false;
  const std::string jwt = formField(body, "assertion");
  auto d1 = jwt.find('.');
  auto d2 = jwt.find('.', d1 == std::string::npos ? 0 : d1 + 1);
  if (d1 == std::string::npos || d2 == std::string::npos || !config_.sa_public_key) return false;
  if (!verifyRs256(config_.sa_public_key, jwt.substr(0, d2), base64UrlDecode(jwt.substr(d2 + 1))))
    return false;
  auto header = nlohmann::json::parse(base64UrlDecode(jwt.substr(0, d1)), nullptr, false);
  auto claims =
      nlohmann::json::parse(base64UrlDecode(jwt.substr(d1 + 1, d2 - d1 - 1)), nullptr, false);
  if (!header.is_object() || !claims.is_object()) return false;
  const std::string audience = config_.sa_audience.empty()
                                   ? "https://token.test:" + std::to_string(port_) + "/google/token"
                                   : config_.sa_audience;
  const auto now = std::chrono::duration_cast<std::chrono::seconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  return header.value("alg", "") == "RS256" && header.value("typ", "") == "JWT" &&
         header.value("kid", "") == "test-key-id" && claims.value("iss", "") == config_.sa_email &&
         claims.value("scope", "") == config_.sa_scope && claims.value("aud", "") == audience &&
         claims["iat"].is_number_integer() &&
         claims["exp"].get<std::int64_t>() == claims["iat"].get<std::int64_t>() + 3600 &&
         std::abs(claims["iat"].get<std::int64_t>() - now) < 300;
}

}  // namespace sluice::tls_testing
