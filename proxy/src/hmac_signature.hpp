// `inject.hmac`: the signature the proxy computes for each request a rule allows, over a
// message template naming the request's method, canonical path, query, a timestamp and the
// body (read whole by the body stage, request_body.hpp). docs/credentials.md "HMAC signatures".
#pragma once

#include <cstdint>
#include <expected>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sluice/policy/secrets.hpp"
#include "sluice/policy/workflow.hpp"

namespace sluice::proxy {

/// What a message template may name, for one request (as it goes upstream).
struct HmacParts {
  std::string_view method;
  std::string_view path;       // canonical
  std::string_view query;      // without '?'
  std::string_view body;       // empty when the request has none
  std::int64_t timestamp = 0;  // Unix seconds
};

using HeaderList = std::vector<std::pair<std::string, std::string>>;

/// The header fields to set: `h.header` = prefix + encoded MAC of the expanded message, and
/// `h.timestamp_header` = the timestamp when configured. An error (naming the secret, never
/// its value) when the key is not in `secrets`.
std::expected<HeaderList, std::string> hmacHeaders(const policy::HmacSigning& h,
                                                   const HmacParts& parts,
                                                   const policy::SecretStore* secrets);

/// The raw MAC of `message` under `key` (for tests and the benchmark).
std::string hmacDigest(policy::HmacSigning::Algorithm algorithm, std::string_view key,
                       const std::vector<std::string_view>& message);

}  // namespace sluice::proxy
