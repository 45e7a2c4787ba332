// One execution's wiring (wiring.hpp).
#include "sluice/execution/wiring.hpp"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <chrono>

#include "sluice/base/clock.hpp"
#include "sluice/base/hex.hpp"
#include "sluice/base/json.hpp"
#include "sluice/runner/cgroup.hpp"
#include "sluice/runner/environment.hpp"

namespace sluice::execution {
namespace rn = sluice::runner;
namespace pol = sluice::policy;

namespace {
// Where the sandbox's TLS clients look for trust anchors (the runner points SSL_CERT_FILE and
// friends there, see docs/sandbox.md).
constexpr const char* kSandboxCaBundle = "/etc/ssl/certs/ca-certificates.crt";

}  // namespace

std::vector<rn::HostMount> hostMounts(const pol::Workflow& w) {
  std::vector<rn::HostMount> out;
  for (const auto& m : w.sandbox.mounts) out.push_back({m.source, m.target});
  return out;
}

std::expected<rn::Limits, std::string> workflowLimits(const pol::Workflow& w,
                                                      const rn::LimitOverrides& overrides) {
  rn::Limits base;
  base.timeout = w.sandbox.timeout;
  base.cpu_time = w.sandbox.cpu_time;
  base.memory = w.sandbox.memory;
  base.pids = w.sandbox.pids;
  base.output = w.sandbox.output;
  base.disk = w.sandbox.disk;
  base.file_size = w.sandbox.file_size;
  base.open_files = w.sandbox.open_files;
  return rn::applyOverrides(base, overrides);
}

std::expected<std::vector<std::string>, std::string> sandboxEnvironment(
    const std::vector<std::string>& env, const std::vector<proxy::Placeholder>& placeholders,
    bool network_proxy) {
  std::vector<std::string> out = env;
  for (const proxy::Placeholder& ph : placeholders) {
    for (const std::string& kv : env)
      if (kv.substr(0, kv.find('=')) == ph.env)
        return std::unexpected(ph.env + ": set by rule '" + ph.rule_id + "' (" +
                               (ph.swapped ? "inject.placeholder_env" : "inject.aws_sigv4") +
                               "), cannot be given");
    out.push_back(ph.env + "=" + ph.token);
  }
  if (auto checked = rn::buildEnvironment(out, network_proxy); !checked)
    return std::unexpected(checked.error());
  return out;
}

bool inspectsTls(const pol::Workflow& w) {
  return std::any_of(w.rules.begin(), w.rules.end(),
                     [](const pol::Rule& r) { return r.tls == pol::TlsMode::kInspect; });
}

std::vector<std::pair<std::string, std::string>> caBundleFiles(
    const pol::Workflow& w, const proxy::CertificateAuthority& ca) {
  if (w.sandbox.network != pol::NetworkMode::kProxy || !inspectsTls(w)) return {};
  return {{kSandboxCaBundle, proxy::CertificateAuthority::mergedBundle(ca.certificatePem())}};
}

rn::NetworkSummary networkSummary(const proxy::Stats& st) {
  rn::NetworkSummary n;
  n.allowed = st.allowed;
  n.denied = st.denied;
  n.failed = st.failed;
  n.connections = st.connections;
  n.requests = st.requests;
  n.bytes_out = st.bytes_out;
  n.bytes_in = st.bytes_in;
  n.dns_queries = st.dns_queries;
  n.dns_denied = st.dns_denied;
  n.would_deny = st.would_deny;
  for (const auto& d : st.denials)
    n.denials.push_back({d.host, d.port, d.rule, d.reason, d.method, d.path});
  for (const auto& f : st.failures)
    n.failures.push_back({f.host, f.port, f.rule, f.reason, f.method, f.path});
  return n;
}

void addNetwork(rn::ReceiptContext& ctx, const proxy::Stats& st) {
  ctx.network = networkSummary(st);
  for (const auto& g : st.policy_generations)
    ctx.policy_generations.push_back({g.generation, g.policy_sha256, g.since_ms});
}

rn::RunResult failedResult(const base::Error& e, const rn::RunSpec& spec, bool full_isolation) {
  const bool setup = !rn::commandNotStarted(e);
  rn::RunResult failed;
  failed.exit_code = base::exitStatus(e.code);
  failed.started_at = failed.ended_at = std::chrono::system_clock::now();
  failed.err.text =
      "sluice: " + (setup ? "setup failed at step '" + e.where + "': " + e.message : e.message) +
      "\n";
  failed.err.bytes = failed.err.text.size();
  failed.isolation.namespaces = {"mount", "pid", "net", "ipc", "uts", "cgroup"};
  failed.isolation.seccomp = failed.isolation.no_new_privs = true;
  failed.isolation.uid = spec.uid;
  failed.isolation.gid = spec.gid;
  failed.isolation.cgroup = full_isolation ? "v1" : "none";
  if (auto layout = rn::detectCgroupLayout(); full_isolation && layout)
    failed.isolation.cgroup = layout->version == rn::CgroupVersion::kV2 ? "v2" : "v1";
  return failed;
}

audit::ExecutionRecord executionRecord(const nlohmann::json& receipt, const rn::RunResult& r,
                                       const rn::ReceiptContext& ctx) {
  audit::ExecutionRecord rec;
  rec.id = receipt["execution_id"].get<std::string>();
  rec.workflow = ctx.workflow;
  rec.policy_sha256 = ctx.policy_sha256;
  rec.argv_json = base::dumpJson(receipt["argv"]);
  rec.started_at_ms = base::epochMs(r.started_at);
  rec.ended_at_ms = base::epochMs(r.ended_at);
  rec.exit_code = r.exit_code;
  rec.signal = r.signal;
  rec.limit_hit = std::string(rn::limitHitName(r.limit_hit));
  rec.usage_json = base::dumpJson(receipt["usage"]);
  rec.stdout_bytes = r.out.bytes;
  rec.stderr_bytes = r.err.bytes;
  rec.stdout_truncated = r.out.truncated;
  rec.stderr_truncated = r.err.truncated;
  rec.artifacts_json = base::dumpJson(receipt["artifacts"]);
  rec.receipt_json = base::dumpJson(receipt);
  return rec;
}

std::string newExecutionId(std::string_view prefix) {
  // getrandom(2), not OpenSSL's RNG: initialising that reads openssl.cnf, a cost `sluice run`
  // would pay on every start.
  unsigned char b[8] = {};
  while (::getrandom(b, sizeof b, 0) < 0 && errno == EINTR) {
  }
  return std::string(prefix) + base::hexEncode(std::span<const std::uint8_t>(b, sizeof b));
}

}  // namespace sluice::execution
