// Bearer tokens minted at the proxy (docs/credentials.md): a rule's `inject.oauth2` (the
// client-credentials grant, RFC 6749 4.4) or `inject.google_service_account` (a JWT signed with
// the service account's RSA key, RFC 7523) is turned into `Authorization: Bearer TOKEN` on the
// requests that rule allows.
//
// The proxy asks the token endpoint itself, as its own request through the same admission as
// any other: the workflow's decision for a POST to the token URL at every address it resolves
// to (SSRF guard, cidrs, deny rules), the vetted address dialled, the upstream's certificate
// verified with the process's trust (--upstream-ca), a connections row of kind `token` and a
// requests row. Tokens are cached per process, keyed by the workflow, the rule and the values
// of the secrets the grant uses (two workflows, or two credentials, never share one), until
// shortly before they expire; while one fetch is in flight every request that needs the same
// token waits for it (no thundering herd). A failed fetch refuses the requests waiting for it
// with token_unavailable (502) and is tried again by the next request after a short backoff.
// Neither the token nor the client secret ever reaches the sandbox, a log line or a row.
#pragma once

#include <chrono>
#include <expected>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "exchange.hpp"
#include "refusal.hpp"

namespace sluice::proxy {

struct InjectionResult;  // injection.hpp

/// What a token is fetched on behalf of: the connection of the request that needs it (its
/// listener names the rows' execution; its matcher decides the token endpoint).
struct TokenAsker {
  std::shared_ptr<Context> ctx;
  std::shared_ptr<Listener> listener;
  std::shared_ptr<const policy::Matcher> matcher;
  std::uint64_t generation = 1;  // of `matcher`: the token fetch's rows carry it
};

/// A token endpoint's answer: the token (secret bytes) and how long it lives.
struct FreshToken {
  std::string value;
  std::chrono::milliseconds lifetime{0};
};

/// How a token request is sent: the endpoint, the form body and the client authentication
/// (both hold secret bytes and are wiped when the grant goes away).
struct TokenGrant {
  std::string url;
  std::string body;
  std::string authorization;         // "Basic ..." or empty
  std::vector<std::string> secrets;  // names of the secrets used (for the audit row)
  std::string scheme;                // "oauth2" | "google_service_account" (row detail)
  TokenGrant() = default;
  TokenGrant(TokenGrant&&) = default;
  TokenGrant& operator=(TokenGrant&&) = default;
  ~TokenGrant();
};

/// The token request for `rule` (which mints a token), with its secrets expanded from
/// `secrets` (a Google grant signs its JWT here, issued at `now`). Errors say what is missing
/// or malformed, never a value.
std::expected<TokenGrant, Refusal> makeTokenGrant(const policy::Rule& rule,
                                                  const policy::SecretStore* secrets,
                                                  std::chrono::system_clock::time_point now);

/// Parses a token endpoint's JSON answer (access_token, token_type Bearer, expires_in).
std::expected<FreshToken, std::string> parseTokenResponse(std::string_view body);

/// How long a token answered with `expires_in` is used: minus a margin (10%, at most 60 s),
/// so a request never carries one that expires on its way.
std::chrono::milliseconds usableFor(std::chrono::seconds expires_in);

/// The per-process cache of minted tokens, with one fetch in flight per key.
class TokenCache {
 public:
  TokenCache();
  ~TokenCache();
  TokenCache(const TokenCache&) = delete;
  TokenCache& operator=(const TokenCache&) = delete;

  /// The bearer token for a request allowed by `rule` (which mints one): cached while fresh,
  /// else fetched once for every request asking meanwhile. The value is secret: wipe it.
  net::awaitable<std::expected<std::string, Refusal>> bearer(TokenAsker asker,
                                                             const policy::Rule& rule);

  /// Fetches so far (every one, failed ones too), for tests and the benchmark.
  std::uint64_t fetches() const;

  struct State;  // token_source.cpp

 private:
  std::shared_ptr<State> state_;
};

/// The request-pipeline step: when `d`'s rule mints a token, gets it (waiting for a fetch
/// when needed) and sets `Authorization: Bearer TOKEN` on `fields` in place of any the client
/// sent, noting it in `inj` (the field to wipe, the secrets used) and on `conn` (redaction).
/// Nothing is done for other rules. The refusal when no token can be had.
net::awaitable<std::optional<Refusal>> injectMintedToken(ConnState& conn, const policy::Decision& d,
                                                         PmrFields& fields, InjectionResult& inj);

}  // namespace sluice::proxy
