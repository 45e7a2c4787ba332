// AWS Signature Version 4: parse, verify, sign again (sigv4.hpp).
#include "sigv4.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <algorithm>
#include <ctime>

#include "sluice/base/digest.hpp"
#include "sluice/base/hex.hpp"

namespace sluice::proxy::sigv4 {
namespace {

constexpr std::string_view kAlgorithm = "AWS4-HMAC-SHA256";

Key hmac(std::span<const std::uint8_t> key, std::string_view data) {
  Key out{};
  const std::string mac = base::hmac(
      base::HmacDigest::kSha256, {reinterpret_cast<const char*>(key.data()), key.size()}, {{data}});
  std::copy_n(mac.begin(), std::min(mac.size(), out.size()), out.begin());
  return out;
}

bool iequal(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

int hexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string percentDecode(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      int hi = hexValue(s[i + 1]);
      int lo = hexValue(s[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out += static_cast<char>(hi * 16 + lo);
        i += 2;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

const std::string* header(const Request& req, std::string_view name) {
  for (const auto& [n, v] : req.headers)
    if (iequal(n, name)) return &v;
  return nullptr;
}

std::string_view pathOf(std::string_view target) { return target.substr(0, target.find('?')); }

std::string_view queryOf(std::string_view target) {
  auto q = target.find('?');
  return q == std::string_view::npos ? std::string_view() : target.substr(q + 1);
}

// The query's name=value pairs, decoded, in order.
std::vector<std::pair<std::string, std::string>> queryPairs(std::string_view query) {
  std::vector<std::pair<std::string, std::string>> out;
  while (!query.empty()) {
    auto amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (pair.empty()) continue;
    auto eq = pair.find('=');
    out.emplace_back(percentDecode(pair.substr(0, eq)), eq == std::string_view::npos
                                                            ? std::string()
                                                            : percentDecode(pair.substr(eq + 1)));
  }
  return out;
}

const std::string* queryParam(const std::vector<std::pair<std::string, std::string>>& q,
                              std::string_view name) {
  for (const auto& [n, v] : q)
    if (n == name) return &v;
  return nullptr;
}

// RFC 3986 5.2.4, and repeated slashes removed, as AWS services (but S3) expect.
std::string removeDotSegments(std::string_view path) {
  if (path.empty()) return "/";
  std::vector<std::string_view> out;
  std::string_view rest = path;
  while (!rest.empty()) {
    auto slash = rest.find('/');
    std::string_view seg = rest.substr(0, slash);
    rest = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
    if (seg.empty() || seg == ".") continue;
    if (seg == "..") {
      if (!out.empty()) out.pop_back();
      continue;
    }
    out.push_back(seg);
  }
  std::string joined = path.front() == '/' ? "/" : "";
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (i) joined += '/';
    joined += out[i];
  }
  if (path.back() == '/' && !out.empty()) joined += '/';
  return joined;
}

std::string canonicalUri(std::string_view path, std::string_view service) {
  if (path.empty()) return "/";
  if (service == "s3") return std::string(path);  // S3: the path as sent, not encoded again
  return uriEncode(removeDotSegments(path), true);
}

std::string canonicalQuery(std::string_view query, bool presigned) {
  std::vector<std::pair<std::string, std::string>> enc;
  for (auto& [n, v] : queryPairs(query)) {
    if (presigned && n == "X-Amz-Signature") continue;
    enc.emplace_back(uriEncode(n, false), uriEncode(v, false));
  }
  std::sort(enc.begin(), enc.end());
  std::string out;
  for (const auto& [n, v] : enc) {
    if (!out.empty()) out += '&';
    out += n + "=" + v;
  }
  return out;
}

// Every value of a header, trimmed, inner runs of spaces made one, joined by ','.
std::string canonicalValue(const Request& req, std::string_view name) {
  std::string out;
  bool first = true;
  for (const auto& [n, v] : req.headers) {
    if (!iequal(n, name)) continue;
    if (!first) out += ',';
    first = false;
    bool space = false;
    for (char c : trim(v)) {
      if (c == ' ' || c == '\t') {
        space = true;
        continue;
      }
      if (space) out += ' ';
      space = false;
      out += c;
    }
  }
  return out;
}

std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> out;
  for (;;) {
    auto p = s.find(sep);
    out.emplace_back(s.substr(0, p));
    if (p == std::string_view::npos) return out;
    s.remove_prefix(p + 1);
  }
}

std::unexpected<Failure> malformed(std::string why) {
  return std::unexpected(Failure{Problem::kMalformed, std::move(why)});
}

// "AKID/DATE/REGION/SERVICE/aws4_request" into `a`.
bool parseCredential(std::string_view cred, Auth& a) {
  auto parts = split(cred, '/');
  if (parts.size() != 5 || parts[4] != "aws4_request" || parts[0].empty() || parts[1].size() != 8 ||
      parts[2].empty() || parts[3].empty())
    return false;
  a.access_key_id = parts[0];
  a.date = parts[1];
  a.region = parts[2];
  a.service = parts[3];
  return true;
}

bool isHex64(std::string_view s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

// Authorization: AWS4-HMAC-SHA256 Credential=..., SignedHeaders=..., Signature=...
std::expected<Auth, Failure> parseHeaderAuth(const Request& req, std::string_view value) {
  Auth a;
  value = trim(value.substr(kAlgorithm.size()));
  for (const auto& part : split(value, ',')) {
    std::string_view kv = trim(part);
    auto eq = kv.find('=');
    if (eq == std::string_view::npos) return malformed("Authorization component without '='");
    std::string_view k = kv.substr(0, eq), v = kv.substr(eq + 1);
    if (k == "Credential" && !parseCredential(v, a))
      return malformed("Authorization Credential is not AKID/DATE/REGION/SERVICE/aws4_request");
    if (k == "SignedHeaders") a.signed_headers = split(v, ';');
    if (k == "Signature") a.signature = v;
  }
  const std::string* date = header(req, "x-amz-date");
  if (a.access_key_id.empty() || a.signed_headers.empty() || !isHex64(a.signature))
    return malformed("Authorization lacks Credential, SignedHeaders or a hex Signature");
  if (!date) return malformed("a SigV4 Authorization without x-amz-date");
  a.amz_date = std::string(trim(*date));
  return a;
}

std::expected<Auth, Failure> parseQueryAuth(const Request& req) {
  auto q = queryPairs(queryOf(req.target));
  Auth a;
  a.presigned = true;
  const std::string* alg = queryParam(q, "X-Amz-Algorithm");
  const std::string* cred = queryParam(q, "X-Amz-Credential");
  const std::string* date = queryParam(q, "X-Amz-Date");
  const std::string* sh = queryParam(q, "X-Amz-SignedHeaders");
  const std::string* sig = queryParam(q, "X-Amz-Signature");
  if (!alg || *alg != kAlgorithm) return malformed("X-Amz-Algorithm is not AWS4-HMAC-SHA256");
  if (!cred || !parseCredential(*cred, a)) return malformed("X-Amz-Credential does not parse");
  if (!date || !sh || !sig || !isHex64(*sig))
    return malformed("presigned URL lacks X-Amz-Date, X-Amz-SignedHeaders or X-Amz-Signature");
  a.amz_date = *date;
  a.signed_headers = split(*sh, ';');
  a.signature = *sig;
  const std::string* payload = queryParam(q, "X-Amz-Content-Sha256");
  a.payload_hash =
      payload ? *payload : std::string(a.service == "s3" ? kUnsignedPayload : kEmptyHash);
  return a;
}

// The payload hash a header signature was made over.
std::expected<std::string, Failure> payloadHash(const Request& req,
                                                std::optional<std::string_view> body_hash) {
  if (const std::string* h = header(req, "x-amz-content-sha256")) {
    std::string v(trim(*h));
    if (isHex64(v) || v == kUnsignedPayload || v == kStreamingPayload ||
        v == "STREAMING-UNSIGNED-PAYLOAD-TRAILER")
      return v;
    return std::unexpected(
        Failure{Problem::kUnsupported, "payload mode '" + v + "' cannot be signed again"});
  }
  if (body_hash) return std::string(*body_hash);
  return std::unexpected(Failure{Problem::kBodyHashNeeded,
                                 "the body is signed but its hash is not stated "
                                 "(x-amz-content-sha256)"});
}

std::string credentialOf(const Auth& a) { return a.access_key_id + "/" + a.scope(); }

std::string joined(const std::vector<std::string>& v, char sep) {
  std::string out;
  for (const auto& s : v) {
    if (!out.empty()) out += sep;
    out += s;
  }
  return out;
}

std::string authorizationOf(const Auth& a) {
  return std::string(kAlgorithm) + " Credential=" + credentialOf(a) +
         ", SignedHeaders=" + joined(a.signed_headers, ';') + ", Signature=" + a.signature;
}

// A presigned URL's query with the new credential, token and signature (the others as sent).
std::string presignedQuery(std::string_view query, const Auth& a, std::string_view token) {
  std::string out;
  auto add = [&](std::string_view n, std::string_view v) {
    if (!out.empty()) out += '&';
    out += uriEncode(n, false) + "=" + uriEncode(v, false);
  };
  for (const auto& [n, v] : queryPairs(query)) {
    if (n == "X-Amz-Signature" || n == "X-Amz-Security-Token") continue;
    add(n, n == "X-Amz-Credential" ? credentialOf(a) : v);
  }
  if (!token.empty()) add("X-Amz-Security-Token", token);
  return out;
}

std::string signatureOf(const Request& req, const Auth& a, std::string_view secret) {
  return hmacHex(signingKey(secret, a), stringToSign(a, canonicalRequest(req, a)));
}

}  // namespace

std::string uriEncode(std::string_view s, bool keep_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' ||
        (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string amzDate(std::chrono::system_clock::time_point now) {
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

bool isSigned(const Request& req) {
  if (const std::string* a = header(req, "authorization"))
    if (trim(*a).starts_with(kAlgorithm)) return true;
  return queryOf(req.target).find("X-Amz-Signature=") != std::string_view::npos;
}

std::expected<Auth, Failure> parseAuth(const Request& req,
                                       std::optional<std::string_view> body_hash) {
  const std::string* authz = header(req, "authorization");
  if (!authz || !trim(*authz).starts_with(kAlgorithm)) return parseQueryAuth(req);
  auto a = parseHeaderAuth(req, trim(*authz));
  if (!a) return a;
  auto payload = payloadHash(req, body_hash);
  if (!payload) return std::unexpected(payload.error());
  a->payload_hash = std::move(*payload);
  return a;
}

std::string canonicalRequest(const Request& req, const Auth& auth) {
  std::string out = req.method + "\n" + canonicalUri(pathOf(req.target), auth.service) + "\n" +
                    canonicalQuery(queryOf(req.target), auth.presigned) + "\n";
  for (const auto& h : auth.signed_headers) out += h + ":" + canonicalValue(req, h) + "\n";
  out += "\n" + joined(auth.signed_headers, ';') + "\n" + auth.payload_hash;
  return out;
}

std::string stringToSign(const Auth& auth, std::string_view canonical_request) {
  return std::string(kAlgorithm) + "\n" + auth.amz_date + "\n" + auth.scope() + "\n" +
         base::sha256Hex(canonical_request);
}

Key signingKey(std::string_view secret, const Auth& auth) {
  std::string k = "AWS4" + std::string(secret);
  Key key = hmac({reinterpret_cast<const std::uint8_t*>(k.data()), k.size()}, auth.date);
  OPENSSL_cleanse(k.data(), k.size());
  key = hmac(key, auth.region);
  key = hmac(key, auth.service);
  return hmac(key, "aws4_request");
}

std::string hmacHex(const Key& key, std::string_view data) {
  return base::hexEncode(std::span<const std::uint8_t>(hmac(key, data)));
}

std::expected<Auth, Failure> verify(const Request& req, const Credentials& placeholder,
                                    std::optional<std::string_view> body_hash) {
  auto a = parseAuth(req, body_hash);
  if (!a) return a;
  if (a->access_key_id != placeholder.access_key_id)
    return std::unexpected(Failure{
        Problem::kWrongAccessKey,
        "signed as access key id '" + a->access_key_id + "', not the sandbox's AWS_ACCESS_KEY_ID"});
  const std::string expected = signatureOf(req, *a, placeholder.secret_access_key);
  if (CRYPTO_memcmp(expected.data(), a->signature.data(), expected.size()) != 0)
    return std::unexpected(Failure{Problem::kSignatureMismatch,
                                   "the SigV4 signature was not made with the sandbox's "
                                   "AWS_SECRET_ACCESS_KEY"});
  return a;
}

std::expected<Resigned, Failure> resign(const Request& req, const Auth& verified,
                                        const Credentials& real,
                                        std::chrono::system_clock::time_point now) {
  Resigned out;
  out.auth = verified;
  Auth& a = out.auth;
  a.access_key_id = std::string(real.access_key_id);
  Request next = req;
  auto set = [&](std::string name, std::string value) {
    std::erase_if(next.headers, [&](const auto& h) { return iequal(h.first, name); });
    next.headers.emplace_back(name, value);
    out.set.emplace_back(std::move(name), std::move(value));
  };
  if (a.presigned) {
    next.target = std::string(pathOf(req.target)) + "?" +
                  presignedQuery(queryOf(req.target), a, real.session_token);
    a.signature = signatureOf(next, a, real.secret_access_key);
    out.target = next.target + "&X-Amz-Signature=" + a.signature;
    return out;
  }
  a.amz_date = amzDate(now);
  a.date = a.amz_date.substr(0, 8);
  set("x-amz-date", a.amz_date);
  auto& sh = a.signed_headers;
  std::erase(sh, std::string("x-amz-security-token"));
  if (!real.session_token.empty()) {
    set("x-amz-security-token", std::string(real.session_token));
    sh.push_back("x-amz-security-token");
    std::sort(sh.begin(), sh.end());
  } else if (header(next, "x-amz-security-token")) {
    std::erase_if(next.headers,
                  [](const auto& h) { return iequal(h.first, "x-amz-security-token"); });
    out.erase.push_back("x-amz-security-token");
  }
  a.signature = signatureOf(next, a, real.secret_access_key);
  set("authorization", authorizationOf(a));
  out.target = req.target;
  return out;
}

ChunkChain chainOf(const Auth& auth, std::string_view secret) {
  return ChunkChain{signingKey(secret, auth), auth.amz_date, auth.scope(), auth.signature};
}

std::string chunkSignature(const ChunkChain& chain, std::string_view data_hash_hex) {
  std::string sts = "AWS4-HMAC-SHA256-PAYLOAD\n" + chain.amz_date + "\n" + chain.scope + "\n" +
                    chain.previous + "\n" + std::string(kEmptyHash) + "\n" +
                    std::string(data_hash_hex);
  return hmacHex(chain.key, sts);
}

}  // namespace sluice::proxy::sigv4
