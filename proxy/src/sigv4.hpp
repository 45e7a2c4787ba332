// AWS Signature Version 4, as the proxy needs it for `inject.aws_sigv4`: read the signature a
// client made with the sandbox's placeholder key (Authorization header or presigned query),
// check it, and sign the request again with the real key. Pure: no I/O, no clock of its own
// (callers pass `now`), header fields as plain pairs. Secrets are never put in errors.
//
// The canonical request follows AWS's description (and botocore): S3 ("s3" in the credential
// scope) signs the path as sent; every other service signs it with dot segments and repeated
// slashes removed, URI-encoded once more. The query is decoded and encoded again, sorted.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <expected>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::proxy::sigv4 {

using Key = std::array<std::uint8_t, 32>;  ///< a derived signing key (HMAC-SHA256)

struct Credentials {
  std::string_view access_key_id;
  std::string_view secret_access_key;
  std::string_view session_token;  ///< empty: none
};

/// A request as SigV4 sees it: method, origin-form target, header fields as sent.
struct Request {
  std::string method;
  std::string target;
  std::vector<std::pair<std::string, std::string>> headers;
};

/// The signature a request carries.
struct Auth {
  bool presigned = false;  ///< in the query (X-Amz-Signature), not in Authorization
  std::string access_key_id;
  std::string date;  ///< YYYYMMDD of the credential scope
  std::string region;
  std::string service;
  std::vector<std::string> signed_headers;  ///< lower-case, in the client's order
  std::string signature;                    ///< lower-case hex
  std::string amz_date;                     ///< YYYYMMDDTHHMMSSZ
  std::string payload_hash;                 ///< hex, UNSIGNED-PAYLOAD or a STREAMING-... mode
  std::string scope() const { return date + "/" + region + "/" + service + "/aws4_request"; }
};

enum class Problem : std::uint8_t {
  kMalformed,          ///< the signature cannot be read
  kWrongAccessKey,     ///< signed as another access key id than the placeholder
  kSignatureMismatch,  ///< not signed with the placeholder secret
  kUnsupported,        ///< a signing mode the proxy cannot sign again
  kBodyHashNeeded,     ///< signed over a body hash the request does not state
};

struct Failure {
  Problem problem;
  std::string detail;
};

inline constexpr std::string_view kStreamingPayload = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD";
inline constexpr std::string_view kUnsignedPayload = "UNSIGNED-PAYLOAD";
inline constexpr std::string_view kEmptyHash =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// Whether the request carries a SigV4 signature at all (header or query).
bool isSigned(const Request& req);

/// Reads the request's signature. `body_hash`: the hex SHA-256 of the body when the caller
/// knows it (needed only when the client signed one and sent no x-amz-content-sha256).
std::expected<Auth, Failure> parseAuth(const Request& req,
                                       std::optional<std::string_view> body_hash = std::nullopt);

std::string canonicalRequest(const Request& req, const Auth& auth);
std::string stringToSign(const Auth& auth, std::string_view canonical_request);
Key signingKey(std::string_view secret, const Auth& auth);
/// Lower-case hex HMAC-SHA256 of `data` under `key`.
std::string hmacHex(const Key& key, std::string_view data);

/// Reads and checks the signature against the placeholder credentials. The access key id must
/// be the placeholder's (kWrongAccessKey), the signature must match (kSignatureMismatch,
/// compared in constant time).
std::expected<Auth, Failure> verify(const Request& req, const Credentials& placeholder,
                                    std::optional<std::string_view> body_hash = std::nullopt);

/// The chain a streaming upload's chunk signatures follow (sigv4 "STREAMING-...-PAYLOAD").
struct ChunkChain {
  Key key{};
  std::string amz_date;
  std::string scope;
  std::string previous;  ///< the seed (header signature), then each chunk's
};

/// What signing again changes.
struct Resigned {
  std::vector<std::pair<std::string, std::string>> set;  ///< header fields to set (replace)
  std::vector<std::string> erase;                        ///< header fields to remove
  std::string target;                                    ///< the new target (presigned URLs)
  Auth auth;                                             ///< the new signature
};

/// Signs `req` (as it will be forwarded) again with the real credentials, keeping the signed
/// headers, the scope's region and service and the payload mode of `verified`. Header
/// signatures get x-amz-date = `now`; presigned URLs keep their X-Amz-Date and X-Amz-Expires
/// (so their validity window stays what the client asked for). With a session token,
/// x-amz-security-token is set (and signed); without one, a client's is removed.
std::expected<Resigned, Failure> resign(const Request& req, const Auth& verified,
                                        const Credentials& real,
                                        std::chrono::system_clock::time_point now);

/// The chunk chain of a verified signature made with `secret` (for ChunkResigner).
ChunkChain chainOf(const Auth& auth, std::string_view secret);

/// One chunk signature: HMAC over AWS4-HMAC-SHA256-PAYLOAD, the date, the scope, the previous
/// signature, the empty hash and the chunk data's hash (hex).
std::string chunkSignature(const ChunkChain& chain, std::string_view data_hash_hex);

/// URI-encodes as SigV4 does: everything but A-Z a-z 0-9 - _ . ~ (and '/' when `keep_slash`).
std::string uriEncode(std::string_view s, bool keep_slash);

/// `now` as YYYYMMDDTHHMMSSZ.
std::string amzDate(std::chrono::system_clock::time_point now);

}  // namespace sluice::proxy::sigv4
