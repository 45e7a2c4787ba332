// Admission (admission.hpp).
#include "admission.hpp"

#include <string>

namespace sluice::serve {
namespace {

Refusal refusalOf(const base::Error& error) {
  const ApiError e = apiError(error);
  return Refusal{e.status, e.reason, e.message, e.retry_after};
}

}  // namespace

Admission::Admission(SessionManager& sessions, const Shares& shares, std::size_t max_body_bytes)
    : sessions_(sessions),
      runs_(shares.runs, shares.runs_per_caller, "executions running", "--max-runs",
            "too_many_runs"),
      max_body_bytes_(max_body_bytes) {}

BodyPlan Admission::plan(const Request& head) {
  const std::string path = head.target.substr(0, head.target.find('?'));
  BodyPlan plan;
  plan.limit = kSmallBodyBytes;
  constexpr std::string_view kSessions = "/v1/sessions/";
  std::string id, sub;
  if (path.starts_with(kSessions)) {
    const std::string tail = path.substr(kSessions.size());
    id = tail.substr(0, tail.find('/'));
    sub = tail.substr(id.size());
  }
  const bool post = head.method == http::verb::post;
  if ((post && path == "/v1/runs") || (post && !id.empty() && sub == "/exec")) {
    // The slot is taken before the body is read, and held until the answer is out.
    plan.limit = max_body_bytes_;
    auto hold = runs_.acquire(head.caller.name);
    if (!hold)
      plan.refuse = refusalOf(hold.error());
    else
      plan.ticket = std::move(*hold);
  } else if (head.method == http::verb::put && !id.empty() && sub.starts_with("/files/")) {
    // An upload goes to disk as it arrives; it can be no larger than its session's scratch.
    auto limit = sessions_.uploadLimit(head.caller, id);
    if (!limit) {
      plan.refuse = refusalOf(limit.error());
    } else {
      plan.limit = *limit > 0 ? *limit : max_body_bytes_;
      plan.spool = true;
    }
  }
  return plan;
}

}  // namespace sluice::serve
