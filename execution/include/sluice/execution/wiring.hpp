// One execution's wiring, the same for `sluice run` and `sluice serve` (runs and session execs):
// the workflow's limits with overrides that may only tighten, the sandbox's environment with
// the proxy's placeholder tokens, the CA bundle a TLS-inspecting workflow's sandbox trusts, the
// receipt's network part, and the receipt's audit row.
#pragma once

#include <expected>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "sluice/audit/store.hpp"
#include "sluice/policy/workflow.hpp"
#include "sluice/proxy/certificate_authority.hpp"
#include "sluice/proxy/proxy.hpp"
#include "sluice/runner/limits.hpp"
#include "sluice/runner/receipt.hpp"
#include "sluice/runner/sandbox.hpp"

namespace sluice::execution {

/// The workflow's read-only host paths (`sandbox.mounts`, checked by the loader) as the
/// runner binds them.
std::vector<runner::HostMount> hostMounts(const policy::Workflow& w);

/// The workflow's sandbox limits with `overrides` applied; the error names what would loosen.
std::expected<runner::Limits, std::string> workflowLimits(const policy::Workflow& w,
                                                          const runner::LimitOverrides& overrides);

/// `env` (K=V) plus each placeholder's VAR=token; a K=V naming a placeholder's variable is
/// refused ("VAR: set by rule 'R' (inject.placeholder_env)"). Checked like the runner does.
std::expected<std::vector<std::string>, std::string> sandboxEnvironment(
    const std::vector<std::string>& env, const std::vector<proxy::Placeholder>& placeholders,
    bool network_proxy);

/// The CA bundle file a sandbox of `w` needs (its system CAs plus `ca`) when `w` inspects TLS
/// through the proxy; none otherwise.
std::vector<std::pair<std::string, std::string>> caBundleFiles(
    const policy::Workflow& w, const proxy::CertificateAuthority& ca);

/// True when some rule of `w` inspects TLS (it then needs a CA).
bool inspectsTls(const policy::Workflow& w);

/// The receipt's network counters from the proxy's.
void addNetwork(runner::ReceiptContext& ctx, const proxy::Stats& st);
/// The receipt's network counters from the proxy's (runner::networkJson renders them).
runner::NetworkSummary networkSummary(const proxy::Stats& st);

/// A result for an execution that never ran (a setup step failed, or the command cannot
/// start), so that it still has a receipt: exit 125/126/127, the reason on stderr, and the
/// isolation `spec` would have had (`full_isolation`: root with cgroups).
runner::RunResult failedResult(const base::Error& e, const runner::RunSpec& spec,
                               bool full_isolation);

/// The executions row of a finished execution whose receipt is `receipt` (built by
/// runner::buildReceipt, plus `caller`/`session_id` for `sluice serve`).
audit::ExecutionRecord executionRecord(const nlohmann::json& receipt, const runner::RunResult& r,
                                       const runner::ReceiptContext& ctx);

/// A fresh random id, `prefix` + 16 hex digits ("ex-3f2a..."): executions, sessions, prepared
/// sandboxes (it names their cgroup, so it must be unique per host and unguessable).
std::string newExecutionId(std::string_view prefix = "ex-");

}  // namespace sluice::execution
