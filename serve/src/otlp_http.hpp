// The OTLP/HTTP transport of the exporter (otlp.cpp): the endpoint URL, one POST over http:// or
// https:// (OpenSSL; the system CAs or --otlp-ca, the host name verified), and what a reply
// means for a retry (docs/deploy.md "OpenTelemetry").
#pragma once

#include <boost/asio/ssl/context.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "sluice/base/error.hpp"

namespace sluice::serve::detail {

struct OtlpTarget {
  bool tls = false;
  std::string host;
  std::string port;
  std::string prefix;  // path before /v1/logs, without a trailing '/'
};

/// http[s]://HOST[:PORT][/PATH] (port 80 or 443 by default); USER:PASSWORD@ is refused.
base::Result<OtlpTarget> parseOtlpEndpoint(const std::string& url);

struct OtlpReply {
  int status = 0;
  std::optional<std::chrono::seconds> retry_after;  // the reply's Retry-After, when it has one
};

class OtlpClient {
 public:
  /// `ca_file`: PEM CAs to trust for https (empty: the system's).
  static base::Result<std::unique_ptr<OtlpClient>> make(OtlpTarget target,
                                                        const std::string& ca_file);
  /// One POST of a JSON body; the collector's reply, or why there is none (kUnavailable).
  base::Result<OtlpReply> post(const std::string& path, std::string body);
  /// "http[s]://HOST:PORT", for messages.
  std::string where() const;

 private:
  explicit OtlpClient(OtlpTarget target);
  OtlpTarget target_;
  std::optional<boost::asio::ssl::context> tls_;
};

/// Whether a failed POST is worth another try: no reply at all (connection refused, reset,
/// timed out, TLS failed), 429 or 5xx. Any other status is final.
bool otlpRetryable(const base::Result<OtlpReply>& reply);

/// How long to wait before attempt `attempt` + 1 (1-based): the reply's Retry-After when it has
/// one (at most kMaxRetryAfter), else 250 ms doubled per attempt, at most 8 s.
std::chrono::milliseconds otlpBackoff(int attempt, const base::Result<OtlpReply>& reply);

/// Delta-seconds or an HTTP-date (RFC 9110 "Retry-After"); nullopt when neither.
std::optional<std::chrono::seconds> parseRetryAfter(const std::string& value);

}  // namespace sluice::serve::detail
