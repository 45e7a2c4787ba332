// `--approve-with CMD` (sluice run, sluice mcp): each approval an `ask` rule raises is put to a
// command the operator chose. CMD runs outside the sandbox, as the user who started sluice,
// with `/bin/sh -c CMD`; it gets the approval's JSON (DESIGN.md "Policy": id, execution_id,
// session_id, workflow, caller, rule, host, port, method, path, asked_at, expires_at) on stdin
// and answers on stdout: `allow` or `deny`, optionally followed by a scope, `once`,
// `execution` or `host`, to remember the answer for the rest of the execution (the JSON's
// `covers` says what each would cover). Anything else, a non-zero exit, or no answer before
// the approval expires is a deny. Reference: docs/approvals.md.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "sluice/proxy/approvals.hpp"

namespace sluice::execution {

class ApproveWith {
 public:
  /// Answers the approvals `desk` raises for `owner` ("" = all) with `command`. At most
  /// `parallel` commands run at once; the rest wait their turn (their timeouts still run).
  ApproveWith(std::shared_ptr<proxy::ApprovalDesk> desk, std::string command, std::string owner,
              unsigned parallel = 4);
  /// Stops watching, kills commands still running (their approvals are then denied) and waits.
  ~ApproveWith();
  ApproveWith(const ApproveWith&) = delete;
  ApproveWith& operator=(const ApproveWith&) = delete;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

/// What one answer line says (exposed for tests): allow?, its scope; `valid` false for
/// anything that is not an answer.
struct ApproverAnswer {
  bool valid = false;
  bool allow = false;
  proxy::Scope scope = proxy::Scope::kOnce;
};
ApproverAnswer parseApproverAnswer(const std::string& out);

}  // namespace sluice::execution
