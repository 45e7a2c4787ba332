// Refusals: every answer the proxy gives instead of forwarding is built here, from a reason of
// the one vocabulary (policy/reason.hpp) and the table that gives each its HTTP status and
// error category. Rendered as status, X-Sluice-Reason and a JSON body
// {"error", "workflow", "rule", "reason", "detail"}.
#pragma once

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

  std::string_view reasonText() const { return policy::reasonName(reason); }
};

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
