// Request admission (docs/serve.md "Limits" and "Quotas"): once a request's caller is known and
// before any byte of its body is read, how large that body may be and where it goes, and the
// execution slot a run or a session exec takes (429 + Retry-After when the caller's share or
// the daemon's total is full). HttpServer asks it through HttpServerOptions::plan.
#pragma once

#include <cstddef>

#include "http_server.hpp"
#include "quotas.hpp"
#include "sessions.hpp"

namespace sluice::serve {

class Admission {
 public:
  /// Bodies of small JSON requests (sessions, approvals, anything unlisted).
  static constexpr std::size_t kSmallBodyBytes = 64 * 1024;

  /// Runs and execs may carry `max_body_bytes`; uploads their session's disk limit (spooled).
  Admission(SessionManager& sessions, const Shares& shares, std::size_t max_body_bytes);

  BodyPlan plan(const Request& head);
  /// Executions running now (all callers).
  std::size_t running() const { return runs_.held(); }

 private:
  SessionManager& sessions_;
  Quota runs_;
  std::size_t max_body_bytes_;
};

}  // namespace sluice::serve
