// Tokens minted at the proxy (token_source.hpp): the grants, the fetch through the admission,
// the cache with one fetch in flight per key, and the pipeline step that sets the header.
#include "token_source.hpp"

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509_vfy.h>

#include <algorithm>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "audit_rows.hpp"
#include "http_rules.hpp"
#include "injection.hpp"
#include "log.hpp"
#include "sluice/base/digest.hpp"
#include "sluice/base/net_tls.hpp"
#include "tls_context.hpp"
#include "upstream_dial.hpp"

namespace sluice::proxy {

using policy::Reason;
using TokenResult = std::expected<std::string, Refusal>;

namespace {

// A failed fetch is not tried again for this long: a dead token endpoint is asked once a
// second at most, however many requests need it.
constexpr auto kFailureBackoff = std::chrono::seconds(1);
// RFC 6749 5.1 only recommends expires_in: without it, a token is used this long.
constexpr auto kDefaultLifetime = std::chrono::seconds(300);
// A token endpoint's answer is small; a bigger one is refused.
constexpr std::size_t kMaxTokenResponse = 64 * 1024;
// Entries beyond this many are swept of expired ones when a new key comes.
constexpr std::size_t kSweepAbove = 256;

// ---------------------------------------------------------------------------------------------
// Encodings

std::string base64(std::string_view in) {
  std::string out(4 * ((in.size() + 2) / 3), '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(in.data()),
                                static_cast<int>(in.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

// RFC 7515 2: base64url without padding.
std::string base64url(std::string_view in) {
  std::string out = base64(in);
  while (!out.empty() && out.back() == '=') out.pop_back();
  for (auto& c : out) c = c == '+' ? '-' : c == '/' ? '_' : c;
  return out;
}

// application/x-www-form-urlencoded (RFC 6749 appendix B).
std::string formEncode(std::string_view in) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(in.size());
  for (unsigned char c : in) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '*') {
      out += static_cast<char>(c);
    } else if (c == ' ') {
      out += '+';
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

Refusal secretRefusal(const policy::Rule& rule, std::string why) {
  return refusal(Reason::kSecretUnavailable, std::move(why), rule.id);
}

Refusal tokenRefusal(const policy::Rule& rule, const std::string& url, const std::string& why) {
  return refusal(Reason::kTokenUnavailable,
                 "no token for rule " + rule.id + " from " + url + ": " + why, rule.id);
}

std::expected<std::string, Refusal> expand(const policy::Rule& rule, const std::string& tmpl,
                                           const policy::SecretStore* secrets) {
  if (!secrets)
    return std::unexpected(
        secretRefusal(rule, "no secret store is configured for rule " + rule.id + "'s token"));
  auto v = policy::expandSecretTemplate(tmpl, *secrets);
  if (!v) return std::unexpected(secretRefusal(rule, v.error()));
  return std::move(*v);
}

// ---------------------------------------------------------------------------------------------
// Grants

// RFC 6749 4.4.2, client authentication by HTTP Basic (2.3.1) unless `auth: body`.
std::expected<TokenGrant, Refusal> oauth2Grant(const policy::Rule& rule,
                                               const policy::SecretStore* secrets) {
  const policy::OAuth2Grant& g = *rule.inject.oauth2;
  auto id = expand(rule, g.client_id, secrets);
  if (!id) return std::unexpected(std::move(id.error()));
  auto secret = expand(rule, g.client_secret, secrets);
  if (!secret) {
    policy::wipeString(*id);
    return std::unexpected(std::move(secret.error()));
  }
  TokenGrant out;
  out.url = g.token_url;
  out.scheme = "oauth2";
  out.body = "grant_type=client_credentials";
  if (!g.scope.empty()) out.body += "&scope=" + formEncode(g.scope);
  if (!g.audience.empty()) out.body += "&audience=" + formEncode(g.audience);
  std::string eid = formEncode(*id);
  std::string esecret = formEncode(*secret);
  if (g.auth_in_body) {
    out.body += "&client_id=" + eid + "&client_secret=" + esecret;
  } else {
    std::string pair = eid + ":" + esecret;
    out.authorization = "Basic " + base64(pair);
    policy::wipeString(pair);
  }
  for (auto* s : {&*id, &*secret, &eid, &esecret}) policy::wipeString(*s);
  out.secrets = rule.inject.secret_names;
  return out;
}

struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct MdCtxFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};

// RS256 (RFC 7518 3.3): RSASSA-PKCS1-v1_5 with SHA-256 over `input`, by the PEM key.
std::expected<std::string, std::string> signRs256(std::string_view pem, std::string_view input) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  std::unique_ptr<EVP_PKEY, PkeyFree> key(
      bio ? PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr) : nullptr);
  BIO_free(bio);
  if (!key || EVP_PKEY_base_id(key.get()) != EVP_PKEY_RSA) {
    ERR_clear_error();
    return std::unexpected(std::string("the key file's private_key is not a PEM RSA key"));
  }
  std::unique_ptr<EVP_MD_CTX, MdCtxFree> md(EVP_MD_CTX_new());
  std::size_t len = 0;
  const auto* in = reinterpret_cast<const unsigned char*>(input.data());
  if (!md || EVP_DigestSignInit(md.get(), nullptr, EVP_sha256(), nullptr, key.get()) != 1 ||
      EVP_DigestSign(md.get(), nullptr, &len, in, input.size()) != 1) {
    ERR_clear_error();
    return std::unexpected(std::string("cannot sign with the service account's key"));
  }
  std::string sig(len, '\0');
  if (EVP_DigestSign(md.get(), reinterpret_cast<unsigned char*>(sig.data()), &len, in,
                     input.size()) != 1) {
    ERR_clear_error();
    return std::unexpected(std::string("cannot sign with the service account's key"));
  }
  sig.resize(len);
  return sig;
}

// A string field of the key file ("" when absent or not a string).
std::string keyField(const nlohmann::json& key, const char* name) {
  auto it = key.find(name);
  return it != key.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// Overwrites every string of a parsed key file before it is freed.
void wipeJson(nlohmann::json& j) {
  if (j.is_string()) {
    policy::wipeString(j.get_ref<std::string&>());
  } else if (j.is_structured()) {
    for (auto& v : j) wipeJson(v);
  }
}

// The signed JWT of RFC 7523 2.1 for the key file `key`, asking for `g.scopes`.
std::expected<std::string, std::string> serviceAccountJwt(
    const nlohmann::json& key, const policy::GoogleServiceAccount& g,
    std::chrono::system_clock::time_point now) {
  const std::string email = keyField(key, "client_email");
  std::string pem = keyField(key, "private_key");
  const std::string uri = keyField(key, "token_uri");
  if (email.empty() || pem.empty()) {
    policy::wipeString(pem);
    return std::unexpected(std::string("the key file has no client_email or private_key"));
  }
  // The policy's token_url is what the workflow allows: a key file cannot send the proxy
  // elsewhere.
  if (!uri.empty() && uri != g.token_url) {
    policy::wipeString(pem);
    return std::unexpected("the key file's token_uri " + uri + " is not the token_url " +
                           g.token_url + " the policy allows");
  }
  nlohmann::json header = {{"alg", "RS256"}, {"typ", "JWT"}};
  if (auto kid = keyField(key, "private_key_id"); !kid.empty()) header["kid"] = kid;
  std::string scope;
  for (const auto& s : g.scopes) scope += (scope.empty() ? "" : " ") + s;
  const auto iat = std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count();
  nlohmann::json claims = {
      {"iss", email}, {"scope", scope}, {"aud", g.token_url}, {"iat", iat}, {"exp", iat + 3600}};
  const std::string input = base64url(header.dump()) + "." + base64url(claims.dump());
  auto sig = signRs256(pem, input);
  policy::wipeString(pem);
  if (!sig) return std::unexpected(sig.error());
  return input + "." + base64url(*sig);
}

std::expected<TokenGrant, Refusal> googleGrant(const policy::Rule& rule,
                                               const policy::SecretStore* secrets,
                                               std::chrono::system_clock::time_point now) {
  const policy::GoogleServiceAccount& g = *rule.inject.google_service_account;
  auto text = expand(rule, g.key, secrets);
  if (!text) return std::unexpected(std::move(text.error()));
  auto key = nlohmann::json::parse(*text, nullptr, false);
  policy::wipeString(*text);
  if (!key.is_object()) {
    wipeJson(key);
    return std::unexpected(tokenRefusal(rule, g.token_url,
                                        "the secret named by key is not a service account's JSON "
                                        "key file"));
  }
  auto jwt = serviceAccountJwt(key, g, now);
  wipeJson(key);
  if (!jwt) return std::unexpected(tokenRefusal(rule, g.token_url, jwt.error()));
  TokenGrant out;
  out.url = g.token_url;
  out.scheme = "google_service_account";
  out.body = "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=" + *jwt;
  out.secrets = rule.inject.secret_names;
  return out;
}

// The cache key: the workflow (name and policy digest), the rule, and the values of the
// secrets its grant uses, digested (the key itself holds no secret).
std::expected<std::string, Refusal> cacheKey(const policy::Workflow& w, const policy::Rule& rule,
                                             const policy::SecretStore* secrets) {
  base::Sha256 h;
  for (std::string_view part :
       {std::string_view(w.name), std::string_view(w.sha256), std::string_view(rule.id)}) {
    h.update(part);
    h.update(std::string_view("\0", 1));
  }
  for (const auto& name : rule.inject.secret_names) {
    auto v = secrets ? secrets->find(name) : std::nullopt;
    if (!v)
      return std::unexpected(secretRefusal(
          rule, secrets ? "secret '" + name + "' is not in the secret store"
                        : "no secret store is configured for rule " + rule.id + "'s token"));
    h.update(name);
    h.update(std::string_view("\0", 1));
    h.update(std::to_string(v->size()) + ":");
    h.update(*v);
  }
  auto d = h.finish();
  return std::string(reinterpret_cast<const char*>(d.data()), d.size());
}

// ---------------------------------------------------------------------------------------------
// The fetch: the proxy's own request, admitted like any other.

// The question the token endpoint is decided by, as `policy explain` asks it: a plain http://
// request at once; https as its tunnel, and as its request when that tunnel is inspected.
policy::Query tokenQuery(const policy::Matcher& m, const policy::Target& t,
                         const policy::HttpRequest& req, bool https) {
  if (!https) return {t, policy::Visibility::kPlainHttp, &req, nullptr, true};
  auto tunnel = m.decide({t, policy::Visibility::kTunnel, nullptr});
  if (tunnel.allowed && tunnel.tls == policy::TlsMode::kInspect)
    return {t, policy::Visibility::kTunnel, &req};
  return {t, policy::Visibility::kTunnel, nullptr};
}

class TokenFetch : public std::enable_shared_from_this<TokenFetch> {
 public:
  TokenFetch(TokenAsker asker, const policy::Rule& rule, TokenGrant grant, policy::ParsedUrl url,
             policy::HttpRequest canon, const net::any_io_executor& ex)
      : a_(std::move(asker)),
        rule_(rule),
        grant_(std::move(grant)),
        url_(std::move(url)),
        canon_(std::move(canon)),
        https_(url_.scheme == "https"),
        stream_(ex, a_.ctx->tls ? a_.ctx->tls->upstream : plain_),
        watch_(ex),
        ev_(connectionRow(*a_.ctx, *a_.listener, a_.matcher->workflow(),
                          audit::ConnectionKind::kToken, a_.generation)) {
    ev_.host = url_.target.host;
    ev_.port = url_.target.port;
    ev_.tls = https_ ? audit::TlsHandling::kInspect : audit::TlsHandling::kNone;
    ev_.detail =
        "the proxy's own token request for rule " + rule_.id + " (inject." + grant_.scheme + ")";
  }
  ~TokenFetch() {
    buffer_.clear();
    auto all = buffer_.prepare(buffer_.capacity());
    OPENSSL_cleanse(all.data(), all.size());
  }

  net::awaitable<std::expected<FreshToken, Refusal>> run();

 private:
  net::awaitable<std::expected<VettedAddress, Refusal>> connect();
  net::awaitable<std::optional<Refusal>> handshake();
  net::awaitable<std::expected<FreshToken, Refusal>> ask(RequestRecord& rec);
  template <typename Stream>
  net::awaitable<ErrorCode> roundTrip(Stream& s, http::request<http::string_body>& req,
                                      http::response_parser<http::string_body>& p);
  Refusal failed(const std::string& why) { return tokenRefusal(rule_, grant_.url, why); }

  TokenAsker a_;
  const policy::Rule& rule_;
  TokenGrant grant_;
  policy::ParsedUrl url_;
  policy::HttpRequest canon_;
  bool https_;
  net::ssl::context plain_{net::ssl::context::tls_client};  // unused unless no TLS is set up
  beast::ssl_stream<tcp::socket> stream_;
  Watch watch_;
  beast::flat_buffer buffer_;
  audit::ConnectionEvent ev_;
  bool timed_out_ = false;
};

// Admits the token endpoint (decision at every address), dials it, speaks TLS to it, asks.
// Its rows are written on every path.
net::awaitable<std::expected<FreshToken, Refusal>> TokenFetch::run() {
  if (https_ && !a_.ctx->tls)
    co_return std::unexpected(failed(
        "this proxy has no TLS set up for upstreams (it needs a CA: sluice proxy --ca-dir DIR)"));
  const auto started = Clock::now();
  auto at = co_await connect();
  if (!at) {
    const Refusal& r = at.error();
    recordDeniedConnection(*a_.ctx, *a_.listener->account, ev_, r);
    co_return std::unexpected(failed(std::string(r.reasonText()) + ": " + r.detail));
  }
  allowConnection(ev_, at->endpoint, at->decision.rule_id);
  std::expected<FreshToken, Refusal> got;
  {
    RequestRecord rec(*a_.ctx, *a_.listener, *a_.listener->account, a_.matcher->workflow(), ev_.id,
                      canon_.method, url_.target.host, canon_.path, a_.generation);
    rec.decided(true, at->decision.rule_id, Reason::kAllowed);
    rec.injected(grant_.secrets);
    rec.setPort(url_.target.port);
    rec.at(ev_.resolved_ip, !https_);
    if (auto r = co_await handshake()) {
      rec.refused(*r);
      denyConnection(ev_, *r);
      got = std::unexpected(failed(r->detail));
    } else {
      got = co_await ask(rec);
    }
  }
  ErrorCode ignored;
  stream_.next_layer().close(ignored);
  watch_.timer.cancel();  // its handler holds this fetch alive
  finishConnection(*a_.ctx, *a_.listener->account, ev_, started);
  co_return got;
}

// The admission's last steps for the proxy's own request: the decision at every address the
// name resolves to, then the vetted addresses dialled.
net::awaitable<std::expected<VettedAddress, Refusal>> TokenFetch::connect() {
  const auto q = tokenQuery(*a_.matcher, url_.target, canon_, https_);
  auto vetted = co_await vetAddresses(a_.ctx, a_.matcher, q, rule_.id);
  if (!vetted) co_return std::unexpected(std::move(vetted.error()));
  auto self = shared_from_this();
  co_return co_await dialVetted(a_.ctx, stream_.next_layer(), watch_, *vetted, url_.target,
                                (*vetted)[0].decision.rule_id, self);
}

// Verified TLS (https only): the certificate must chain to the system or --upstream-ca trust
// and name the token endpoint's host.
net::awaitable<std::optional<Refusal>> TokenFetch::handshake() {
  if (!https_) co_return std::nullopt;
  SSL* ssl = stream_.native_handle();
  expectUpstreamName(ssl, url_.target);
  ErrorCode ec;
  {
    auto self = shared_from_this();
    Deadline d(watch_, stream_.next_layer(), Clock::now() + a_.ctx->options.connect_timeout,
               [&] { return self; });
    co_await stream_.async_handshake(net::ssl::stream_base::client,
                                     net::redirect_error(net::use_awaitable, ec));
    if (ec && d.fired())
      co_return networkFailure(Reason::kUpstreamTimeout, kFailureTimeout,
                               "TLS handshake with " + url_.target.authority() + " timed out");
  }
  if (!ec) co_return std::nullopt;
  const long verify = SSL_get_verify_result(ssl);
  ERR_clear_error();
  if (verify != X509_V_OK)
    co_return networkFailure(Reason::kUpstreamTls, kFailureTls,
                             "certificate verification failed for " + url_.target.authority() +
                                 ": " + X509_verify_cert_error_string(verify));
  co_return networkFailure(
      Reason::kUpstreamTls, kFailureTls,
      "TLS handshake with " + url_.target.authority() + " failed: " + ec.message());
}

// Writes the request and reads the answer within the upstream timeout, counting bytes.
template <typename Stream>
net::awaitable<ErrorCode> TokenFetch::roundTrip(Stream& s, http::request<http::string_body>& req,
                                                http::response_parser<http::string_body>& p) {
  auto self = shared_from_this();
  Deadline d(watch_, stream_.next_layer(), Clock::now() + a_.ctx->options.upstream_timeout,
             [&] { return self; });
  ErrorCode ec;
  ev_.bytes_up += co_await http::async_write(s, req, net::redirect_error(net::use_awaitable, ec));
  if (!ec)
    ev_.bytes_down +=
        co_await http::async_read(s, buffer_, p, net::redirect_error(net::use_awaitable, ec));
  timed_out_ = ec && d.fired();
  co_return ec;
}

// POSTs the grant and reads the token out of the answer. The request's secret bytes and the
// answer are wiped before returning.
net::awaitable<std::expected<FreshToken, Refusal>> TokenFetch::ask(RequestRecord& rec) {
  http::request<http::string_body> req{http::verb::post, canon_.target(), 11};
  req.set(http::field::host, hostField(url_.target, https_ ? 443 : 80));
  req.set(http::field::content_type, "application/x-www-form-urlencoded");
  req.set(http::field::accept, "application/json");
  req.set(http::field::user_agent, "sluice");
  if (!grant_.authorization.empty()) req.set(http::field::authorization, grant_.authorization);
  req.keep_alive(false);
  req.body() = grant_.body;
  req.prepare_payload();
  http::response_parser<http::string_body> p;
  p.body_limit(kMaxTokenResponse);
  rec.forwarding();
  const ErrorCode ec = https_ ? co_await roundTrip(stream_, req, p)
                              : co_await roundTrip(stream_.next_layer(), req, p);
  wipeFields(static_cast<http::fields&>(req), {"Authorization"});
  policy::wipeString(req.body());
  std::string& body = p.get().body();
  std::expected<FreshToken, Refusal> out;
  if (ec) {
    const Reason r = timed_out_ ? Reason::kUpstreamTimeout : Reason::kUpstreamError;
    const std::string why = timed_out_ ? "no answer in time" : "no answer: " + ec.message();
    rec.outcome(static_cast<int>(refusal(r, "").status), r);
    endConnection(ev_, r, why);
    out = std::unexpected(failed(why));
  } else if (rec.outcome(p.get().result_int()); p.get().result_int() != 200) {
    out = std::unexpected(
        failed("the token endpoint answered " + std::to_string(p.get().result_int())));
  } else if (auto t = parseTokenResponse(body)) {
    out = std::move(*t);
  } else {
    out = std::unexpected(failed(t.error()));
  }
  policy::wipeString(body);
  co_return out;
}

net::awaitable<std::expected<FreshToken, Refusal>> fetchToken(const TokenAsker& a,
                                                              const policy::Rule& rule) {
  auto grant = makeTokenGrant(rule, a.listener->secrets.get(), std::chrono::system_clock::now());
  if (!grant) co_return std::unexpected(std::move(grant.error()));
  auto url = policy::parseUrl(grant->url);  // checked by the loader
  if (!url) co_return std::unexpected(tokenRefusal(rule, grant->url, url.error()));
  auto canon = policy::canonicalRequest(
      "POST", url->query.empty() ? url->path : url->path + "?" + url->query);
  if (!canon) co_return std::unexpected(tokenRefusal(rule, grant->url, canon.error().detail));
  auto ex = co_await net::this_coro::executor;
  auto fetch = std::make_shared<TokenFetch>(a, rule, std::move(*grant), std::move(*url),
                                            std::move(*canon), ex);
  co_return co_await fetch->run();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Public helpers

TokenGrant::~TokenGrant() {
  policy::wipeString(body);
  policy::wipeString(authorization);
}

std::expected<TokenGrant, Refusal> makeTokenGrant(const policy::Rule& rule,
                                                  const policy::SecretStore* secrets,
                                                  std::chrono::system_clock::time_point now) {
  if (rule.inject.oauth2) return oauth2Grant(rule, secrets);
  if (rule.inject.google_service_account) return googleGrant(rule, secrets, now);
  return std::unexpected(
      refusal(Reason::kTokenUnavailable, "rule " + rule.id + " mints no token", rule.id));
}

namespace {

// expires_in: a number, or (as some endpoints send it) a string of digits; absent: the
// default. -1 when it is neither.
std::int64_t lifetimeSeconds(const nlohmann::json& v) {
  if (v.is_null()) return kDefaultLifetime.count();
  if (v.is_number_integer()) return v.get<std::int64_t>();
  if (v.is_number()) return static_cast<std::int64_t>(v.get<double>());
  if (!v.is_string()) return -1;
  const auto& s = v.get_ref<const std::string&>();
  if (s.empty() || s.size() > 9 || !std::all_of(s.begin(), s.end(), ::isdigit)) return -1;
  return std::stoll(s);
}

}  // namespace

std::expected<FreshToken, std::string> parseTokenResponse(std::string_view body) {
  auto j = nlohmann::json::parse(body, nullptr, false);
  std::expected<FreshToken, std::string> out =
      std::unexpected(std::string("the answer is not a JSON object with an access_token"));
  if (j.is_object() && j.contains("access_token") && j["access_token"].is_string()) {
    FreshToken t;
    t.value = j["access_token"].get<std::string>();
    auto type = j.contains("token_type") && j["token_type"].is_string()
                    ? j["token_type"].get<std::string>()
                    : std::string("Bearer");
    auto expires = j.contains("expires_in") ? j["expires_in"] : nlohmann::json();
    const std::int64_t secs = lifetimeSeconds(expires);
    // RFC 6750 2.1's b64token: a value that could break the header line is refused.
    const bool printable =
        !t.value.empty() &&
        std::all_of(t.value.begin(), t.value.end(), [](char c) { return c > 0x20 && c < 0x7f; });
    if (!beast::iequals(type, "bearer")) {
      out = std::unexpected("token_type '" + type + "' is not Bearer");
    } else if (!printable) {
      out = std::unexpected(std::string("the access_token is not a bearer token (RFC 6750)"));
    } else if (secs <= 0) {
      out = std::unexpected(std::string("expires_in is not a positive number of seconds"));
    } else {
      t.lifetime = usableFor(std::chrono::seconds(secs));
      out = std::move(t);
    }
    if (!out) policy::wipeString(t.value);
  }
  wipeJson(j);
  return out;
}

std::chrono::milliseconds usableFor(std::chrono::seconds expires_in) {
  const std::chrono::milliseconds life = expires_in;
  const auto margin = std::min<std::chrono::milliseconds>(life / 10, std::chrono::seconds(60));
  return life - margin;
}

// ---------------------------------------------------------------------------------------------
// The cache

struct TokenCache::State {
  struct Entry {
    std::string token;
    Clock::time_point fresh_until{};
    std::optional<Refusal> failure;  // the last fetch's, until retry_at
    Clock::time_point retry_at{};
    bool fetching = false;
    std::vector<std::function<void(TokenResult)>> waiters;
    ~Entry() { policy::wipeString(token); }
  };
  // What an entry has for a request now: a token, a recent failure, or nothing yet.
  std::optional<TokenResult> ready(const Entry& e, Clock::time_point now) const {
    if (!e.token.empty() && now < e.fresh_until) return TokenResult(e.token);
    if (e.failure && now < e.retry_at) return TokenResult(std::unexpected(*e.failure));
    return std::nullopt;
  }
  void sweep(Clock::time_point now) {
    if (entries.size() <= kSweepAbove) return;
    std::erase_if(entries, [&](const auto& kv) {
      const Entry& e = kv.second;
      return !e.fetching && e.waiters.empty() && now >= e.fresh_until && now >= e.retry_at;
    });
  }

  std::mutex mu;
  std::unordered_map<std::string, Entry> entries;
  std::atomic<std::uint64_t> fetches{0};
};

namespace {

enum class Claim { kReady, kWait, kFetch };

// Under the lock: a fresh token or a recent failure (kReady, in `out`), a fetch in flight
// (kWait) or none (kFetch: the caller fetches, the entry says so).
Claim claim(TokenCache::State& s, const std::string& key, std::optional<TokenResult>& out) {
  std::lock_guard lock(s.mu);
  const auto now = Clock::now();
  auto it = s.entries.find(key);
  if (it == s.entries.end()) {
    s.sweep(now);
    it = s.entries.try_emplace(key).first;
  }
  auto& e = it->second;
  if ((out = s.ready(e, now))) return Claim::kReady;
  if (e.fetching) return Claim::kWait;
  e.fetching = true;
  s.fetches.fetch_add(1, std::memory_order_relaxed);
  return Claim::kFetch;
}

// Waits for the fetch in flight for `key`; if it ended in between, takes what it left.
net::awaitable<TokenResult> awaitFetch(std::shared_ptr<TokenCache::State> s, std::string key) {
  auto ex = co_await net::this_coro::executor;
  co_return co_await net::async_initiate<decltype(net::use_awaitable), void(TokenResult)>(
      [&](auto handler) {
        using Handler = std::decay_t<decltype(handler)>;
        auto h = std::make_shared<Handler>(std::move(handler));
        auto resume = [h, ex](TokenResult r) {
          net::post(ex, [h, r = std::move(r)]() mutable { (*h)(std::move(r)); });
        };
        std::lock_guard lock(s->mu);
        auto& e = s->entries[key];
        if (e.fetching) {
          e.waiters.push_back(std::move(resume));
          return;
        }
        auto r = s->ready(e, Clock::now());
        resume(r ? std::move(*r)
                 : TokenResult(std::unexpected(refusal(Reason::kTokenUnavailable,
                                                       "the token fetch ended without a token"))));
      },
      net::use_awaitable);
}

// Stores what the fetch for `key` got and hands it to every request that waited for it.
TokenResult settle(TokenCache::State& s, const std::string& key,
                   std::expected<FreshToken, Refusal> got) {
  std::vector<std::function<void(TokenResult)>> waiters;
  TokenResult result = std::unexpected(Refusal{});
  {
    std::lock_guard lock(s.mu);
    auto& e = s.entries[key];
    e.fetching = false;
    waiters.swap(e.waiters);
    const auto now = Clock::now();
    if (got) {
      policy::wipeString(e.token);
      e.token = std::move(got->value);
      e.fresh_until = now + got->lifetime;
      e.failure.reset();
      result = e.token;
    } else {
      e.failure = got.error();
      e.retry_at = now + kFailureBackoff;
      result = std::unexpected(got.error());
    }
  }
  for (auto& w : waiters) w(result);
  return result;
}

// Settles the fetch with a refusal if the fetcher's frame goes away before it could (the
// proxy stopping): the requests waiting for it are not left hanging.
struct SettleGuard {
  TokenCache::State& s;
  const std::string& key;
  bool done = false;
  ~SettleGuard() {
    if (!done)
      settle(s, key,
             std::unexpected(refusal(Reason::kTokenUnavailable, "the token fetch was abandoned")));
  }
};

}  // namespace

TokenCache::TokenCache() : state_(std::make_shared<State>()) {}
TokenCache::~TokenCache() = default;

std::uint64_t TokenCache::fetches() const {
  return state_->fetches.load(std::memory_order_relaxed);
}

net::awaitable<TokenResult> TokenCache::bearer(TokenAsker asker, const policy::Rule& rule) {
  auto key = cacheKey(asker.matcher->workflow(), rule, asker.listener->secrets.get());
  if (!key) co_return std::unexpected(std::move(key.error()));
  auto s = state_;
  std::optional<TokenResult> ready;
  switch (claim(*s, *key, ready)) {
    case Claim::kReady:
      co_return std::move(*ready);
    case Claim::kWait:
      co_return co_await awaitFetch(s, *key);
    case Claim::kFetch:
      break;
  }
  SettleGuard guard{*s, *key};
  auto got = co_await fetchToken(asker, rule);
  if (!got) log().warn("{}", got.error().detail);
  guard.done = true;
  co_return settle(*s, *key, std::move(got));
}

// ---------------------------------------------------------------------------------------------
// The pipeline step

net::awaitable<std::optional<Refusal>> injectMintedToken(ConnState& conn, const policy::Decision& d,
                                                         PmrFields& fields, InjectionResult& inj) {
  if (!d.rule || !d.rule->inject.mintsToken()) co_return std::nullopt;
  // A named asker: g++ 12 destroys a braced temporary in a co_await expression twice.
  TokenAsker asker{conn.ctx, conn.listener, conn.matcher, conn.generation};
  auto token = co_await conn.ctx->tokens->bearer(asker, *d.rule);
  if (!token) co_return std::move(token.error());
  std::string value = "Bearer " + *token;
  // set() replaces every Authorization the client sent: it can neither read nor override it.
  fields.set(http::field::authorization, value);
  policy::wipeString(value);
  inj.touched.emplace_back("Authorization");
  auto& minted = conn.minted.values;
  if (std::find(minted.begin(), minted.end(), *token) == minted.end()) {
    if (minted.size() == MintedTokens::kKept) {
      policy::wipeString(minted.front());
      minted.erase(minted.begin());
    }
    minted.push_back(*token);
  }
  policy::wipeString(*token);
  for (const auto& n : d.rule->inject.secret_names) {
    if (std::find(inj.secrets.begin(), inj.secrets.end(), n) == inj.secrets.end())
      inj.secrets.push_back(n);
    if (std::find(conn.injected.begin(), conn.injected.end(), n) == conn.injected.end())
      conn.injected.push_back(n);
  }
  co_return std::nullopt;
}

}  // namespace sluice::proxy
