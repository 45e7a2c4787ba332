// Refusals: every answer the proxy gives instead of forwarding is built here, from a reason of
// the one vocabulary (policy/reason.hpp) and the table that gives each its HTTP status and
// error category. Rendered as status, X-Sluice-Reason and a JSON body
// {"error", "workflow", "rule", "reason", "detail"}.
#pragma once

#include <optional>
#include <string>

#include "sluice/base/net.hpp"
#include "sluice/policy/matcher.hpp"

namespace sluice::proxy {

struct Refusal {
  http::status status = http::status::forbidden;
  std::string error;  // category: "denied", "bad_request", "limit_exceeded", "upstream_error"...
  policy::Reason reason = policy::Reason::kNoMatchingRule;
  std::string rule;
  std::string detail;
  /// Set when the policy let it through and the network failed: one of the kFailure* words
  /// below. Its rows say decision `fail` with this reason, and the receipt counts a failure,
  /// not a denial. Empty for every refusal of the policy, a limit or the proxy's own checks.
  std::string failure;
  /// The address the policy refused at (an address-phase denial: the SSRF guard, cidrs), never
  /// dialled: a shadow policy decides the row at it too (shadow.hpp).
  std::optional<policy::IpAddress> address;

  std::string_view reasonText() const { return policy::reasonName(reason); }
};

/// What went wrong when the network failed (Refusal::failure; the receipt's
/// network.failures[].reason and the rows' reason; docs/audit.md "What is counted").
inline constexpr std::string_view kFailureDns = "dns_failed";
inline constexpr std::string_view kFailureRefused = "connect_refused";
inline constexpr std::string_view kFailureUnreachable = "unreachable";
inline constexpr std::string_view kFailureTimeout = "timeout";
inline constexpr std::string_view kFailureTls = "tls_failed";
inline constexpr std::string_view kFailureReset = "reset";
inline constexpr std::string_view kFailureProtocol = "protocol_error";

/// A refusal because the network failed: `reason` is what the client is told (upstream_error,
/// upstream_timeout, upstream_tls), `failure` what failed.
Refusal networkFailure(policy::Reason reason, std::string_view failure, std::string detail,
                       std::string rule = {});

/// The failure word of a socket error from the upstream's side.
std::string_view failureOf(const ErrorCode& ec);

/// The one way to build a refusal: status and category come from the reason's row.
Refusal refusal(policy::Reason reason, std::string detail, std::string rule = {});

/// The refusal of a policy denial (reason code, deciding rule, detail or nearest miss).
Refusal denialRefusal(const policy::Decision& d);

/// The 429 for an exhausted workflow limit.
inline Refusal limitRefusal(std::string detail) {
  return refusal(policy::Reason::kLimitExceeded, std::move(detail));
}

/// The bytes of a refusal response. `keep_alive` false adds Connection: close.
std::string renderRefusal(const Refusal& r, const std::string& workflow, bool keep_alive);

}  // namespace sluice::proxy
