// A loopback HTTPS server playing both an OAuth2 token endpoint and the API its tokens are for,
// for the tests of tokens minted at the proxy (token_test.cpp).
//
// POST /oauth/token: the client-credentials grant (RFC 6749 4.4) with HTTP Basic client
// authentication, checked against the expected client id, secret and scope.
// POST /google/token: the JWT-bearer grant (RFC 7523): the assertion's RS256 signature is
// verified with the service account's public key and its claims checked.
// Either answers {"access_token": "tok-N-<random>", "token_type": "Bearer", "expires_in": E}
// (N counts the grants), or 500 while failing is switched on. It counts every token request and
// keeps every token it issued, so tests can look for them where they must not be.
// Any other path is the API: it records the request's Authorization and answers with it
// reflected in a response header (X-Echo-Authorization), as a debug echo would, and its SHA-256
// in the body.
#pragma once

// clang-format off
#include <utility>  // before Asio: asio#944
// clang-format on

#include <openssl/evp.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "https_upstream.hpp"

namespace sluice::tls_testing {

struct TokenEndpointConfig {
  std::string client_id;
  std::string client_secret;
  std::string scope;
  EVP_PKEY* sa_public_key = nullptr;  // verifies /google/token assertions (not owned)
  std::string sa_email;
  std::string sa_scope;     // the space-joined scopes the assertion must ask for
  std::string sa_audience;  // the aud it must name; "": https://token.test:PORT/google/token
};

class TokenEndpoint {
 public:
  TokenEndpoint(ServerCert cert, TokenEndpointConfig config);
  ~TokenEndpoint();
  TokenEndpoint(const TokenEndpoint&) = delete;
  TokenEndpoint& operator=(const TokenEndpoint&) = delete;

  std::uint16_t port() const { return port_; }

  /// Token requests received (good, bad and failed ones).
  int grants() const { return grants_.load(); }
  /// Token requests whose grant did not check out (answered 400/401).
  int badGrants() const { return bad_grants_.load(); }
  /// Every token issued, in order.
  std::vector<std::string> issued();
  /// The Authorization of every API request, in order.
  std::vector<std::string> apiAuthorizations();

  void setFailing(bool failing) { failing_ = failing; }
  void setExpiresIn(int seconds) { expires_in_ = seconds; }
  /// How long each token answer is held back (so concurrent requests overlap the fetch).
  void setDelay(std::chrono::milliseconds d) { delay_ms_ = static_cast<int>(d.count()); }

 private:
  void acceptLoop();
  void serve(int fd);
  std::string handle(const std::string& method, const std::string& target,
                     const std::string& authorization, const std::string& body, int& status,
                     std::string& echo);
  std::string grantAnswer(bool ok, int& status);
  bool checkClientCredentials(const std::string& authorization, const std::string& body);
  bool checkJwtBearer(const std::string& body);

  ServerCert cert_;
  TokenEndpointConfig config_;
  int listen_fd_ = -1;
  std::uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> grants_{0};
  std::atomic<int> bad_grants_{0};
  std::atomic<bool> failing_{false};
  std::atomic<int> expires_in_{3600};
  std::atomic<int> delay_ms_{0};
  std::mutex mu_;
  std::vector<std::string> issued_;
  std::vector<std::string> api_auth_;
  std::vector<std::thread> threads_;
  std::thread acceptor_;
};

/// Decodes base64url (RFC 4648 5, padding optional); "" on a bad character.
std::string base64UrlDecode(std::string_view in);

}  // namespace sluice::tls_testing
