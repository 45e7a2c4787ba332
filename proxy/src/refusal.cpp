// The table of refusals: reason -> HTTP status and error category (refusal.hpp).
#include "refusal.hpp"

#include <array>
#include <nlohmann/json.hpp>

#include "sluice/base/json.hpp"
#include "sluice/base/net_tls.hpp"

namespace sluice::proxy {
namespace {

using policy::Reason;

struct Row {
  Reason reason;
  http::status status;
  const char* error;
};

constexpr auto kRows = std::to_array<Row>({
    {Reason::kAllowed, http::status::ok, "none"},
    {Reason::kDeniedByRule, http::status::forbidden, "denied"},
    {Reason::kNoMatchingRule, http::status::forbidden, "denied"},
    {Reason::kPortNotAllowed, http::status::forbidden, "denied"},
    {Reason::kMethodNotAllowed, http::status::forbidden, "denied"},
    {Reason::kPathNotAllowed, http::status::forbidden, "denied"},
    {Reason::kPrivateAddress, http::status::forbidden, "denied"},
    {Reason::kAddressNotInCidrs, http::status::forbidden, "denied"},
    {Reason::kIpLiteralNeedsCidrs, http::status::forbidden, "denied"},
    {Reason::kInspectionRequired, http::status::forbidden, "denied"},
    {Reason::kPlaintextCredentials, http::status::forbidden, "denied"},
    {Reason::kApprovalRequired, http::status::forbidden, "denied"},
    {Reason::kApprovalDenied, http::status::forbidden, "denied"},
    {Reason::kApprovalTimeout, http::status::forbidden, "denied"},
    {Reason::kApprovalUnavailable, http::status::forbidden, "denied"},
    {Reason::kExecutionEnded, http::status::forbidden, "denied"},
    {Reason::kInvalidTarget, http::status::bad_request, "bad_request"},
    {Reason::kInvalidMethod, http::status::bad_request, "bad_request"},
    {Reason::kAmbiguousTarget, http::status::bad_request, "bad_request"},
    {Reason::kBodyNotAllowed, http::status::bad_request, "bad_request"},
    {Reason::kInvalidRequest, http::status::bad_request, "bad_request"},
    {Reason::kUnsupportedTransferCoding, http::status::not_implemented, "bad_request"},
    {Reason::kHostMismatch, http::status::bad_request, "bad_request"},
    {Reason::kHeaderTooLarge, http::status::request_header_fields_too_large, "too_large"},
    {Reason::kBodyTooLarge, http::status::payload_too_large, "too_large"},
    {Reason::kHeaderTimeout, http::status::request_timeout, "timeout"},
    {Reason::kLimitExceeded, http::status::too_many_requests, "limit_exceeded"},
    {Reason::kProxyLoop, http::status::forbidden, "denied"},
    {Reason::kAuditUnavailable, http::status::service_unavailable, "audit_unavailable"},
    {Reason::kSecretUnavailable, http::status::bad_gateway, "secret_unavailable"},
    {Reason::kPlaceholderLeak, http::status::forbidden, "denied"},
    {Reason::kSignatureMismatch, http::status::forbidden, "denied"},
    {Reason::kNotHttp, http::status::forbidden, "denied"},
    {Reason::kUpstreamError, http::status::bad_gateway, "upstream_error"},
    {Reason::kUpstreamTimeout, http::status::gateway_timeout, "upstream_timeout"},
    {Reason::kUpstreamTls, http::status::bad_gateway, "upstream_tls"},
    {Reason::kTlsError, http::status::bad_gateway, "tls_error"},
    {Reason::kTlsHandshakeFailed, http::status::bad_request, "bad_request"},
    {Reason::kIdleTimeout, http::status::request_timeout, "timeout"},
    {Reason::kClosed, http::status::service_unavailable, "closed"},
    {Reason::kProtocolNotAllowed, http::status::forbidden, "denied"},
    {Reason::kTokenUnavailable, http::status::bad_gateway, "token_unavailable"},
    {Reason::kPolicyChanged, http::status::forbidden, "denied"},
});

constexpr bool rowsInOrder() {
  for (std::size_t i = 0; i < kRows.size(); ++i)
    if (static_cast<std::size_t>(kRows[i].reason) != i) return false;
  return static_cast<std::size_t>(Reason::kPolicyChanged) + 1 == kRows.size();
}
static_assert(rowsInOrder(), "kRows must list every Reason in enum order");

}  // namespace

Refusal refusal(Reason reason, std::string detail, std::string rule) {
  const Row& row = kRows[static_cast<std::size_t>(reason)];
  return Refusal{row.status, row.error, reason, std::move(rule), std::move(detail), {}, {}};
}

Refusal networkFailure(Reason reason, std::string_view failure, std::string detail,
                       std::string rule) {
  Refusal r = refusal(reason, std::move(detail), std::move(rule));
  r.failure = std::string(failure);
  return r;
}

std::string_view failureOf(const ErrorCode& ec) {
  if (ec == net::error::connection_refused) return kFailureRefused;
  if (ec == net::error::host_unreachable || ec == net::error::network_unreachable)
    return kFailureUnreachable;
  if (ec == net::error::timed_out) return kFailureTimeout;
  if (ec.category() == net::error::get_ssl_category() || ec == net::ssl::error::stream_truncated)
    return kFailureTls;
  const bool closed_early = ec == http::error::end_of_stream || ec == http::error::partial_message;
  if (!closed_early && ec.category() == http::make_error_code(http::error::bad_version).category())
    return kFailureProtocol;  // an answer that is not HTTP
  // Anything else the upstream's side did (reset, closed early, a broken pipe) broke the exchange
  // off.
  return kFailureReset;
}

Refusal denialRefusal(const policy::Decision& d) {
  return refusal(d.reason, d.detail.empty() ? d.nearest_miss : d.detail, d.rule_id);
}

std::string renderRefusal(const Refusal& r, const std::string& workflow, bool keep_alive) {
  nlohmann::json body = {
      {"error", r.error},
      {"workflow", workflow},
      {"rule", r.rule.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.rule)},
      {"reason", r.reasonText()},
      {"detail", r.detail}};
  // A detail can quote client bytes that are not UTF-8 (a mangled target): replace them
  // rather than throw (found by proxy_session_fuzz).
  std::string text = base::dumpJson(body) + "\n";
  std::string out = "HTTP/1.1 ";
  out += std::to_string(static_cast<unsigned>(r.status));
  out += ' ';
  auto phrase = http::obsolete_reason(r.status);
  out.append(phrase.data(), phrase.size());
  out += "\r\nContent-Type: application/json\r\nX-Sluice-Reason: ";
  out += r.reasonText();
  out += "\r\nContent-Length: ";
  out += std::to_string(text.size());
  out += keep_alive ? "\r\n\r\n" : "\r\nConnection: close\r\n\r\n";
  out += text;
  return out;
}

}  // namespace sluice::proxy
