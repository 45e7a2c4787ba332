// The text of every reason (reason.hpp), in one table.
#include "sluice/policy/reason.hpp"

#include <array>
#include <utility>

namespace sluice::policy {
namespace {

constexpr auto kNames = std::to_array<std::pair<Reason, std::string_view>>({
    {Reason::kAllowed, "allowed"},
    {Reason::kDeniedByRule, "denied_by_rule"},
    {Reason::kNoMatchingRule, "no_matching_rule"},
    {Reason::kPortNotAllowed, "port_not_allowed"},
    {Reason::kMethodNotAllowed, "method_not_allowed"},
    {Reason::kPathNotAllowed, "path_not_allowed"},
    {Reason::kPrivateAddress, "private_address"},
    {Reason::kAddressNotInCidrs, "address_not_in_cidrs"},
    {Reason::kIpLiteralNeedsCidrs, "ip_literal_needs_cidrs"},
    {Reason::kInspectionRequired, "inspection_required"},
    {Reason::kPlaintextCredentials, "plaintext_credentials"},
    {Reason::kApprovalRequired, "approval_required"},
    {Reason::kApprovalDenied, "approval_denied"},
    {Reason::kApprovalTimeout, "approval_timeout"},
    {Reason::kApprovalUnavailable, "approval_unavailable"},
    {Reason::kExecutionEnded, "execution_ended"},
    {Reason::kInvalidTarget, "invalid_target"},
    {Reason::kInvalidMethod, "invalid_method"},
    {Reason::kAmbiguousTarget, "ambiguous_target"},
    {Reason::kBodyNotAllowed, "body_not_allowed"},
    {Reason::kInvalidRequest, "invalid_request"},
    {Reason::kUnsupportedTransferCoding, "unsupported_transfer_coding"},
    {Reason::kHostMismatch, "host_mismatch"},
    {Reason::kHeaderTooLarge, "header_too_large"},
    {Reason::kBodyTooLarge, "body_too_large"},
    {Reason::kHeaderTimeout, "header_timeout"},
    {Reason::kLimitExceeded, "limit_exceeded"},
    {Reason::kProxyLoop, "proxy_loop"},
    {Reason::kAuditUnavailable, "audit_unavailable"},
    {Reason::kSecretUnavailable, "secret_unavailable"},
    {Reason::kPlaceholderLeak, "placeholder_leak"},
    {Reason::kSignatureMismatch, "signature_mismatch"},
    {Reason::kNotHttp, "not_http"},
    {Reason::kUpstreamError, "upstream_error"},
    {Reason::kUpstreamTimeout, "upstream_timeout"},
    {Reason::kUpstreamTls, "upstream_tls"},
    {Reason::kTlsError, "tls_error"},
    {Reason::kTlsHandshakeFailed, "tls_handshake_failed"},
    {Reason::kIdleTimeout, "idle_timeout"},
    {Reason::kClosed, "closed"},
    {Reason::kProtocolNotAllowed, "protocol_not_allowed"},
    {Reason::kTokenUnavailable, "token_unavailable"},
    {Reason::kPolicyChanged, "policy_changed"},
});

// The table is indexed by the enum: a reordering or a missing row fails the build.
constexpr bool tableInOrder() {
  for (std::size_t i = 0; i < kNames.size(); ++i)
    if (static_cast<std::size_t>(kNames[i].first) != i) return false;
  return static_cast<std::size_t>(Reason::kPolicyChanged) + 1 == kNames.size();
}
static_assert(tableInOrder(), "kNames must list every Reason in enum order");

}  // namespace

std::string_view reasonName(Reason r) {
  auto i = static_cast<std::size_t>(r);
  return i < kNames.size() ? kNames[i].second : "unknown";
}

}  // namespace sluice::policy
