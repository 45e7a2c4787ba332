// TLS contexts of inspection (tls_context.hpp).
#include "tls_context.hpp"

#include <openssl/err.h>
#include <openssl/x509v3.h>

#include <mutex>
#include <unordered_map>

#include "sluice/policy/target.hpp"

namespace sluice::proxy {

namespace {

constexpr unsigned char kAlpnHttp11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
// Preference order when the client offers both: h2 first.
constexpr unsigned char kAlpnH2Http11[] = {2, 'h', '2', 8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
// TLS 1.3 suites on both sides, AES-128-GCM first as browsers order them (OpenSSL's default
// puts AES-256-GCM-SHA384 first): a handshake's key schedule and ticket MACs are SHA-256, which
// this CPU class hashes in hardware, instead of SHA-384, and each record takes 10 AES rounds
// instead of 14. The same three suites as OpenSSL's default, all AEAD.
constexpr char kTls13Suites[] =
    "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256";

std::string sslErrorText() {
  unsigned long e = ERR_get_error();
  char buf[256] = "unknown error";
  if (e != 0) ERR_error_string_n(e, buf, sizeof buf);
  ERR_clear_error();
  return buf;
}

int sniIndex() {
  static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}

// TLS sessions of verified upstream handshakes, by the authority (host:port) whose certificate
// check made them: the next connection to that authority offers one and resumes (an
// abbreviated handshake: no certificate chain to send, check and verify), as browsers and curl
// do. A session is only ever offered to the authority it was verified for; an upstream that
// declines it gets a full, verified handshake. Bounded; shared by the proxy's threads.
class UpstreamSessions {
 public:
  static constexpr std::size_t kCapacity = 1024;
  // A resumed handshake does not look at the certificate again: bound how long one verified
  // handshake stands in for the next.
  static constexpr long kMaxAgeSeconds = 3600;
  UpstreamSessions() = default;
  UpstreamSessions(const UpstreamSessions&) = delete;
  UpstreamSessions& operator=(const UpstreamSessions&) = delete;
  ~UpstreamSessions() {
    for (auto& [authority, session] : by_authority_) SSL_SESSION_free(session);
  }

  // The cache holds copies and offers copies: OpenSSL marks a connection's own session not
  // resumable when the connection ends without close_notify (as a torn-down tunnel's does),
  // which must not spoil the cached one.

  /// Sets a copy of the session cached for `authority` on `ssl` (before its handshake).
  void offer(SSL* ssl, const std::string& authority) {
    SSL_SESSION* copy = nullptr;
    {
      std::lock_guard lock(mu_);
      auto it = by_authority_.find(authority);
      if (it != by_authority_.end()) copy = SSL_SESSION_dup(it->second);
    }
    if (!copy) return;
    SSL_set_session(ssl, copy);
    SSL_SESSION_free(copy);  // `ssl` holds its own reference
  }
  /// Keeps a copy of `original` as the one to offer `authority` next, for at most an hour
  /// (or the upstream's own lifetime for it, when shorter).
  void keep(const std::string& authority, const SSL_SESSION* original) {
    SSL_SESSION* session = SSL_SESSION_dup(original);
    if (!session) return;
    if (SSL_SESSION_get_timeout(session) > kMaxAgeSeconds)
      SSL_SESSION_set_timeout(session, kMaxAgeSeconds);
    std::lock_guard lock(mu_);
    auto [it, added] = by_authority_.try_emplace(authority, session);
    if (!added) {
      SSL_SESSION_free(it->second);
      it->second = session;
    } else if (by_authority_.size() > kCapacity) {
      // Full: drop another authority's session (it resumes no more; nothing else changes).
      auto victim = by_authority_.begin() == it ? std::next(it) : by_authority_.begin();
      SSL_SESSION_free(victim->second);
      by_authority_.erase(victim);
    }
  }

 private:
  std::mutex mu_;
  std::unordered_map<std::string, SSL_SESSION*> by_authority_;
};

// What an upstream SSL carries for its new-session callback: the cache and its authority.
struct SessionSlot {
  std::shared_ptr<UpstreamSessions> cache;
  std::string authority;
};

void freeSessionSlot(void*, void* ptr, CRYPTO_EX_DATA*, int, long, void*) {
  delete static_cast<SessionSlot*>(ptr);
}
void freeContextSessions(void*, void* ptr, CRYPTO_EX_DATA*, int, long, void*) {
  delete static_cast<std::shared_ptr<UpstreamSessions>*>(ptr);
}
int sessionSlotIndex() {
  static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, freeSessionSlot);
  return index;
}
// The upstream context holds its cache (freed with the context, which every SSL made from it
// keeps alive; each SSL's slot holds the cache too, for tickets that arrive late).
int contextSessionsIndex() {
  static const int index =
      SSL_CTX_get_ex_new_index(0, nullptr, nullptr, nullptr, freeContextSessions);
  return index;
}

// Called when a (TLS 1.3: post-handshake) session arrives on an upstream connection whose
// handshake verified its certificate for the slot's authority. 0: OpenSSL keeps its reference
// (the cache keeps a copy).
int onNewUpstreamSession(SSL* ssl, SSL_SESSION* session) {
  auto* slot = static_cast<SessionSlot*>(SSL_get_ex_data(ssl, sessionSlotIndex()));
  if (slot && SSL_SESSION_is_resumable(session) && SSL_get_verify_result(ssl) == X509_V_OK)
    slot->cache->keep(slot->authority, session);
  return 0;
}

// Upstream connections made by upstreamTlsHandshake resume sessions (UpstreamSessions).
void cacheUpstreamSessions(SSL_CTX* up) {
  SSL_CTX_set_session_cache_mode(up, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
  SSL_CTX_sess_set_new_cb(up, onNewUpstreamSession);
  SSL_CTX_set_ex_data(up, contextSessionsIndex(),
                      new std::shared_ptr<UpstreamSessions>(std::make_shared<UpstreamSessions>()));
}

// Offers `ssl` the session cached for `authority` and marks it so that the sessions it receives
// are cached under `authority`.
void resumeUpstreamSession(SSL* ssl, const std::string& authority) {
  auto* cache = static_cast<std::shared_ptr<UpstreamSessions>*>(
      SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), contextSessionsIndex()));
  if (!cache || SSL_get_ex_data(ssl, sessionSlotIndex())) return;
  (*cache)->offer(ssl, authority);
  SSL_set_ex_data(ssl, sessionSlotIndex(), new SessionSlot{*cache, authority});
}

// Domain fronting guard: the client's SNI must name the host it asked to CONNECT to.
int onServerName(SSL* ssl, int* alert, void*) {
  auto* check = static_cast<SniCheck*>(SSL_get_ex_data(ssl, sniIndex()));
  const char* name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
  if (!check || !name) return SSL_TLSEXT_ERR_OK;  // no SNI: Host is still checked per request
  auto normalized = policy::normalizeHostName(name);
  if (normalized && *normalized == check->expected) return SSL_TLSEXT_ERR_OK;
  check->mismatch = true;
  check->seen = std::string(name).substr(0, 255);
  *alert = SSL_AD_UNRECOGNIZED_NAME;
  return SSL_TLSEXT_ERR_ALERT_FATAL;
}

// Inside the tunnel we speak HTTP/2 (h2_exchange.hpp) or HTTP/1.1: h2 when the client offers
// it, else http/1.1; a client offering neither goes on without ALPN (HTTP/1.1).
int onAlpn(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
           unsigned int inlen, void*) {
  unsigned char* selected = nullptr;
  if (SSL_select_next_proto(&selected, outlen, kAlpnH2Http11, sizeof kAlpnH2Http11, in, inlen) ==
      OPENSSL_NPN_NEGOTIATED) {
    *out = selected;
    return SSL_TLSEXT_ERR_OK;
  }
  return SSL_TLSEXT_ERR_NOACK;
}

}  // namespace

std::string sslError() { return sslErrorText(); }

void expectUpstreamName(SSL* ssl, const policy::Target& t) {
  X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
  if (t.ip) {
    X509_VERIFY_PARAM_set1_ip_asc(param, t.host.c_str());
  } else {
    SSL_set_tlsext_host_name(ssl, t.host.c_str());
    X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    X509_VERIFY_PARAM_set1_host(param, t.host.c_str(), t.host.size());
  }
}

void watchSni(SSL* ssl, SniCheck* check) { SSL_set_ex_data(ssl, sniIndex(), check); }

std::expected<std::shared_ptr<TlsContexts>, std::string> makeTlsContexts(
    const ProxyOptions& options) {
  auto t = std::make_shared<TlsContexts>();
  t->ca = options.ca;
  SSL_CTX* server = t->server.native_handle();
  SSL_CTX_set_min_proto_version(server, TLS1_2_VERSION);
  SSL_CTX_set_options(server, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
  // The proxy's order picks the suite (kTls13Suites); a client that puts ChaCha20 first
  // (no AES hardware) still gets it.
  SSL_CTX_set_options(server, SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_PRIORITIZE_CHACHA);
  if (SSL_CTX_set_ciphersuites(server, kTls13Suites) != 1 ||
      SSL_CTX_set_ciphersuites(t->upstream.native_handle(), kTls13Suites) != 1) {
    return std::unexpected("cannot set the TLS 1.3 cipher suites: " + sslErrorText());
  }
  // One resumption ticket per client handshake instead of OpenSSL's two: each costs the
  // proxy a key derivation, an encryption and a MAC, and a client reconnecting one connection
  // after another (curl, language runtimes) resumes with one; every resumed connection gets
  // a fresh one.
  SSL_CTX_set_num_tickets(server, 1);
  SSL_CTX_set_tlsext_servername_callback(server, onServerName);
  SSL_CTX_set_alpn_select_cb(server, onAlpn, nullptr);

  SSL_CTX* up = t->upstream.native_handle();
  SSL_CTX_set_min_proto_version(up, TLS1_2_VERSION);
  SSL_CTX_set_security_level(up, 2);
  SSL_CTX_set_options(up, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
  SSL_CTX_set_verify(up, SSL_VERIFY_PEER, nullptr);
  if (options.upstream_system_trust && SSL_CTX_set_default_verify_paths(up) != 1) {
    return std::unexpected("cannot load the system trust store: " + sslErrorText());
  }
  for (const auto& f : options.upstream_ca_files) {
    if (SSL_CTX_load_verify_locations(up, f.c_str(), nullptr) != 1) {
      return std::unexpected("cannot load upstream CA file " + f + ": " + sslErrorText());
    }
  }
  cacheUpstreamSessions(up);
  // SSL_CTX_set_alpn_protos returns 0 on success (unlike most of OpenSSL).
  if (SSL_CTX_set_alpn_protos(up, kAlpnHttp11, sizeof kAlpnHttp11) != 0) {
    return std::unexpected("cannot set ALPN: " + sslErrorText());
  }
  return t;
}

bool hasUnread(tcp::socket& s) {
  ErrorCode ec;
  return s.available(ec) > 0 || ec;
}

bool hasUnread(SslStream& s) {
  SSL* ssl = s.native_handle();
  // Asio's engine moves what it reads from the socket into the read BIO (it keeps bytes back
  // only while that BIO is full). Records buffered there need not be data: TLS 1.3 session
  // tickets follow the handshake. Processing them tells: a peek that finds no application
  // data wants more input; a partial record left is counted as unread.
  if (SSL_has_pending(ssl) != 0 || BIO_ctrl_pending(SSL_get_rbio(ssl)) != 0) {
    char c;
    const int n = SSL_peek(ssl, &c, 1);
    const int err = n > 0 ? SSL_ERROR_NONE : SSL_get_error(ssl, n);
    ERR_clear_error();
    if (n > 0 || err != SSL_ERROR_WANT_READ || SSL_has_pending(ssl) != 0) return true;
  }
  return hasUnread(beast::get_lowest_layer(s));
}

std::string_view negotiatedAlpn(SslStream& s) {
  const unsigned char* p = nullptr;
  unsigned int len = 0;
  SSL_get0_alpn_selected(s.native_handle(), &p, &len);
  return p ? std::string_view(reinterpret_cast<const char*>(p), len) : std::string_view();
}

net::awaitable<std::optional<Refusal>> upstreamTlsHandshake(
    SslStream& s, Watch& watch, const policy::Target& t, std::chrono::milliseconds timeout,
    std::function<std::shared_ptr<void>()> keep, std::string rule_id, bool offer_h2) {
  SSL* ssl = s.native_handle();
  expectUpstreamName(ssl, t);
  resumeUpstreamSession(ssl, t.authority());
  if (offer_h2) SSL_set_alpn_protos(ssl, kAlpnH2Http11, sizeof kAlpnH2Http11);
  ErrorCode ec;
  bool timed_out = false;
  {
    Deadline d(watch, s.next_layer(), Clock::now() + timeout, keep);
    co_await s.async_handshake(net::ssl::stream_base::client,
                               net::redirect_error(net::use_awaitable, ec));
    timed_out = ec && d.fired();
  }
  if (!ec) co_return std::nullopt;
  std::string detail;
  long verify = SSL_get_verify_result(ssl);
  if (verify != X509_V_OK) {
    detail = "upstream certificate verification failed for " + t.authority() + ": " +
             X509_verify_cert_error_string(verify);
  } else if (timed_out) {
    detail = "TLS handshake with upstream " + t.authority() + " timed out";
  } else {
    detail = "TLS handshake with upstream " + t.authority() + " failed: " + ec.message();
  }
  ERR_clear_error();
  co_return timed_out
      ? networkFailure(policy::Reason::kUpstreamTimeout, kFailureTimeout, detail,
                       std::move(rule_id))
      : networkFailure(policy::Reason::kUpstreamTls, kFailureTls, detail, std::move(rule_id));
}

}  // namespace sluice::proxy
