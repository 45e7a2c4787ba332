// HMAC signing of a request from a message template (hmac_signature.hpp).
#include "hmac_signature.hpp"

#include <openssl/evp.h>

#include <memory>

#include "sluice/base/digest.hpp"
#include "sluice/base/hex.hpp"

namespace sluice::proxy {
namespace {

// The template's pieces in order: literal text, and each ${variable}'s value. Views into the
// template, `parts`, `timestamp` and `body_sha256` (filled here first).
std::vector<std::string_view> expand(std::string_view tmpl, const HmacParts& parts,
                                     std::string& timestamp, std::string& body_sha256) {
  timestamp = std::to_string(parts.timestamp);
  if (tmpl.find("${body_sha256}") != std::string_view::npos)
    body_sha256 = base::sha256Hex(parts.body);
  std::vector<std::string_view> out;
  std::size_t at = 0;
  for (auto open = tmpl.find("${"); open != std::string_view::npos; open = tmpl.find("${", at)) {
    const auto close = tmpl.find('}', open);
    if (close == std::string_view::npos) break;  // the loader refuses such a template
    out.push_back(tmpl.substr(at, open - at));
    const auto var = tmpl.substr(open + 2, close - open - 2);
    if (var == "method")
      out.push_back(parts.method);
    else if (var == "path")
      out.push_back(parts.path);
    else if (var == "query")
      out.push_back(parts.query);
    else if (var == "body")
      out.push_back(parts.body);
    else if (var == "timestamp")
      out.push_back(timestamp);
    else if (var == "body_sha256")
      out.push_back(body_sha256);
    at = close + 1;
  }
  out.push_back(tmpl.substr(at));
  return out;
}

std::string base64(std::string_view raw) {
  std::string out(4 * ((raw.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(raw.data()),
                                static_cast<int>(raw.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

}  // namespace

std::string hmacDigest(policy::HmacSigning::Algorithm algorithm, std::string_view key,
                       const std::vector<std::string_view>& message) {
  return base::hmac(algorithm == policy::HmacSigning::Algorithm::kSha512
                        ? base::HmacDigest::kSha512
                        : base::HmacDigest::kSha256,
                    key, message);
}

std::expected<HeaderList, std::string> hmacHeaders(const policy::HmacSigning& h,
                                                   const HmacParts& parts,
                                                   const policy::SecretStore* secrets) {
  auto key = secrets ? secrets->find(h.key_secret) : std::nullopt;
  if (!key)
    return std::unexpected("secret '" + h.key_secret + "' (inject.hmac.key) is not in the " +
                           "secret store");
  std::string timestamp, body_sha256;
  const auto message = expand(h.message, parts, timestamp, body_sha256);
  const std::string mac = hmacDigest(h.algorithm, *key, message);
  if (mac.empty()) return std::unexpected(std::string("HMAC computation failed"));
  HeaderList out;
  out.emplace_back(h.header, h.prefix + (h.encoding == policy::HmacSigning::Encoding::kHex
                                             ? base::hexEncode(std::string_view(mac))
                                             : base64(mac)));
  if (!h.timestamp_header.empty())
    out.emplace_back(h.timestamp_header, std::to_string(parts.timestamp));
  return out;
}

}  // namespace sluice::proxy
