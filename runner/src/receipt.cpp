// Building the receipt JSON (see receipt.hpp).
#include "sluice/runner/receipt.hpp"

#include "sluice/base/clock.hpp"
#include "sluice/runner/limits.hpp"

namespace sluice::runner {

std::string formatTimestamp(std::chrono::system_clock::time_point t) {
  return base::formatUtcMs(base::epochMs(t));
}

namespace {

// What the run could read of the host beyond the default sandbox: the policy's mounts and the
// --input files. Each list is present only when there is one (sessions and `sluice serve`
// have no inputs).
void addHostPaths(nlohmann::json& receipt, const RunSpec& spec, const RunResult& r) {
  using nlohmann::json;
  // Only a policy with sandbox.mounts lists them: the host paths the program could read.
  if (!spec.mounts.empty()) {
    json mounts = json::array();
    for (const HostMount& m : spec.mounts)
      mounts.push_back({{"source", m.source}, {"target", m.target}, {"read_only", true}});
    receipt["mounts"] = std::move(mounts);
  }
  // Only a run given --input lists its inputs.
  if (!spec.inputs.empty()) {
    json inputs = json::array();
    for (const InputFile& f : r.inputs) {
      json entry = {{"path", f.path}, {"source", f.source}, {"bytes", f.bytes}};
      if (f.error.empty())
        entry["sha256"] = f.sha256;
      else
        entry["error"] = f.error;
      inputs.push_back(std::move(entry));
    }
    receipt["inputs"] = std::move(inputs);
    receipt["inputs_truncated"] = r.inputs_truncated;
  }
}

// The policy generations the run was decided under, oldest first (only when the proxy decided).
void addGenerations(nlohmann::json& receipt, const ReceiptContext& ctx) {
  if (ctx.policy_generations.empty()) return;
  nlohmann::json out = nlohmann::json::array();
  for (const auto& g : ctx.policy_generations)
    out.push_back({{"generation", g.generation},
                   {"policy_sha256", g.policy_sha256},
                   {"since", formatTimestamp(std::chrono::system_clock::time_point(
                                 std::chrono::milliseconds(g.since_ms)))}});
  receipt["policy_generations"] = std::move(out);
}

}  // namespace

namespace {

// The receipt's objects are filled key by key: a braced initializer list builds each pair as a
// two-element array first and copies nested lists, several times the allocations for the same
// JSON (an object's keys are sorted either way).
nlohmann::json denialList(const std::vector<NetworkSummary::Denial>& items) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& d : items) {
    nlohmann::json j = nlohmann::json::object();
    j["host"] = d.host;
    j["port"] = d.port;
    j["reason"] = d.reason;
    j["rule"] = d.rule.empty() ? nlohmann::json(nullptr) : nlohmann::json(d.rule);
    if (!d.method.empty()) {
      j["method"] = d.method;
      j["path"] = d.path;
    }
    out.push_back(std::move(j));
  }
  return out;
}

nlohmann::json streamJson(const StreamCapture& s) {
  nlohmann::json j = nlohmann::json::object();
  j["bytes"] = s.bytes;
  j["truncated"] = s.truncated;
  j["text"] = s.text;
  return j;
}

nlohmann::json artifactsJson(const RunResult& r) {
  nlohmann::json out = nlohmann::json::array();
  for (const Artifact& a : r.artifacts) {
    nlohmann::json j = nlohmann::json::object();
    j["path"] = a.path;
    j["bytes"] = a.bytes;
    j["sha256"] = a.sha256;
    out.push_back(std::move(j));
  }
  return out;
}

nlohmann::json limitsJson(const Limits& l, const ReceiptContext& ctx) {
  nlohmann::json j = nlohmann::json::object();
  j["timeout_ms"] = l.timeout.count();
  j["cpu_time_ms"] = l.cpu_time.count();
  j["memory"] = l.memory;
  j["pids"] = l.pids;
  j["output"] = l.output;
  j["disk"] = l.disk;
  j["file_size"] = l.file_size ? l.file_size : l.disk;
  j["open_files"] = l.open_files;
  j["network"] = ctx.network_mode;
  return j;
}

nlohmann::json exitJson(const RunResult& r) {
  nlohmann::json j = nlohmann::json::object();
  j["code"] = r.exit_code;
  j["signal"] = r.signal == 0 ? nlohmann::json(nullptr) : nlohmann::json(r.signal);
  j["status"] = r.sluiceExitStatus();
  return j;
}

nlohmann::json usageJson(const Usage& u) {
  nlohmann::json j = nlohmann::json::object();
  j["cpu_user_ms"] = u.cpu_user_ms;
  j["cpu_sys_ms"] = u.cpu_sys_ms;
  j["max_rss_bytes"] = u.max_rss_bytes;
  j["pids_peak"] = u.pids_peak;
  return j;
}

nlohmann::json isolationJson(const Isolation& i) {
  nlohmann::json j = nlohmann::json::object();
  j["namespaces"] = i.namespaces;
  j["seccomp"] = i.seccomp;
  j["landlock"] = i.landlock;
  j["no_new_privs"] = i.no_new_privs;
  j["uid"] = i.uid;
  j["gid"] = i.gid;
  j["cgroup"] = i.cgroup;
  return j;
}

}  // namespace

nlohmann::json networkJson(const NetworkSummary& n, const std::string& mode) {
  nlohmann::json j = nlohmann::json::object();
  j["mode"] = mode;
  j["allowed"] = n.allowed;
  j["denied"] = n.denied;
  j["failed"] = n.failed;
  j["connections"] = n.connections;
  j["requests"] = n.requests;
  j["bytes_out"] = n.bytes_out;
  j["bytes_in"] = n.bytes_in;
  j["denials"] = denialList(n.denials);
  j["failures"] = denialList(n.failures);
  nlohmann::json dns = nlohmann::json::object();
  dns["queries"] = n.dns_queries;
  dns["denied"] = n.dns_denied;
  j["dns"] = std::move(dns);
  return j;
}

nlohmann::json buildReceipt(const RunSpec& spec, const RunResult& r, const ReceiptContext& ctx,
                            const std::optional<std::string>& hash) {
  using nlohmann::json;
  json receipt = json::object();
  receipt["receipt_version"] = 1;
  receipt["execution_id"] = spec.execution_id;
  receipt["workflow"] = ctx.workflow;
  receipt["policy_sha256"] = ctx.policy_sha256;
  receipt["argv"] = spec.argv;
  receipt["started_at"] = formatTimestamp(r.started_at);
  receipt["ended_at"] = formatTimestamp(r.ended_at);
  receipt["duration_ms"] =
      std::chrono::duration_cast<std::chrono::milliseconds>(r.ended_at - r.started_at).count();
  receipt["exit"] = exitJson(r);
  const auto hit = limitHitName(r.limit_hit);
  receipt["limit_hit"] = hit.empty() ? json(nullptr) : json(std::string(hit));
  receipt["limits"] = limitsJson(spec.limits, ctx);
  receipt["usage"] = usageJson(r.usage);
  receipt["stdout"] = streamJson(r.out);
  receipt["stderr"] = streamJson(r.err);
  receipt["artifacts"] = artifactsJson(r);
  json artifacts_truncated = nullptr;
  if (r.artifacts_truncated) {
    artifacts_truncated = json::object();
    artifacts_truncated["reason"] = std::string(artifactSkipName(r.artifacts_truncated->reason));
    artifacts_truncated["skipped"] = r.artifacts_truncated->skipped;
  }
  receipt["artifacts_truncated"] = std::move(artifacts_truncated);
  receipt["network"] = networkJson(ctx.network, ctx.network_mode);
  receipt["isolation"] = isolationJson(r.isolation);
  receipt["hash"] = hash ? json(*hash) : json(nullptr);
  addHostPaths(receipt, spec, r);
  if (ctx.learn) {
    // Loud in the receipt too: this run let through what its policy denies.
    receipt["mode"] = "learn";
    receipt["network"]["would_deny"] = ctx.network.would_deny;
  }
  addGenerations(receipt, ctx);
  return receipt;
}

}  // namespace sluice::runner
