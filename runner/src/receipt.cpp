// Building the receipt JSON (see receipt.hpp).
#include "sluice/runner/receipt.hpp"

#include <ctime>

#include "sluice/base/clock.hpp"
#include "sluice/runner/limits.hpp"

namespace sluice::runner {

std::string formatTimestamp(std::chrono::system_clock::time_point t) {
  const std::int64_t ms = base::epochMs(t);
  std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  ::gmtime_r(&secs, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  char out[64];
  std::snprintf(out, sizeof out, "%s.%03dZ", buf, static_cast<int>(ms % 1000));
  return out;
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

nlohmann::json networkJson(const NetworkSummary& n, const std::string& mode) {
  using nlohmann::json;
  auto list = [](const std::vector<NetworkSummary::Denial>& items, bool with_rule) {
    json out = json::array();
    for (const auto& d : items) {
      json j = {{"host", d.host}, {"port", d.port}, {"reason", d.reason}};
      if (with_rule) j["rule"] = d.rule.empty() ? json(nullptr) : json(d.rule);
      if (!d.method.empty()) {
        j["method"] = d.method;
        j["path"] = d.path;
      }
      out.push_back(std::move(j));
    }
    return out;
  };
  return json{{"mode", mode},
              {"allowed", n.allowed},
              {"denied", n.denied},
              {"failed", n.failed},
              {"connections", n.connections},
              {"requests", n.requests},
              {"bytes_out", n.bytes_out},
              {"bytes_in", n.bytes_in},
              {"denials", list(n.denials, true)},
              {"failures", list(n.failures, true)},
              {"dns", {{"queries", n.dns_queries}, {"denied", n.dns_denied}}}};
}

nlohmann::json buildReceipt(const RunSpec& spec, const RunResult& r, const ReceiptContext& ctx,
                            const std::optional<std::string>& hash) {
  using nlohmann::json;
  auto stream = [](const StreamCapture& s) {
    return json{{"bytes", s.bytes}, {"truncated", s.truncated}, {"text", s.text}};
  };
  json artifacts = json::array();
  for (const Artifact& a : r.artifacts)
    artifacts.push_back({{"path", a.path}, {"bytes", a.bytes}, {"sha256", a.sha256}});
  json artifacts_truncated = nullptr;
  if (r.artifacts_truncated)
    artifacts_truncated = {{"reason", std::string(artifactSkipName(r.artifacts_truncated->reason))},
                           {"skipped", r.artifacts_truncated->skipped}};
  const Limits& l = spec.limits;
  const auto hit = limitHitName(r.limit_hit);
  json receipt = json{
      {"receipt_version", 1},
      {"execution_id", spec.execution_id},
      {"workflow", ctx.workflow},
      {"policy_sha256", ctx.policy_sha256},
      {"argv", spec.argv},
      {"started_at", formatTimestamp(r.started_at)},
      {"ended_at", formatTimestamp(r.ended_at)},
      {"duration_ms",
       std::chrono::duration_cast<std::chrono::milliseconds>(r.ended_at - r.started_at).count()},
      {"exit",
       {{"code", r.exit_code},
        {"signal", r.signal == 0 ? json(nullptr) : json(r.signal)},
        {"status", r.sluiceExitStatus()}}},
      {"limit_hit", hit.empty() ? json(nullptr) : json(std::string(hit))},
      {"limits",
       {{"timeout_ms", l.timeout.count()},
        {"cpu_time_ms", l.cpu_time.count()},
        {"memory", l.memory},
        {"pids", l.pids},
        {"output", l.output},
        {"disk", l.disk},
        {"file_size", l.file_size ? l.file_size : l.disk},
        {"open_files", l.open_files},
        {"network", ctx.network_mode}}},
      {"usage",
       {{"cpu_user_ms", r.usage.cpu_user_ms},
        {"cpu_sys_ms", r.usage.cpu_sys_ms},
        {"max_rss_bytes", r.usage.max_rss_bytes},
        {"pids_peak", r.usage.pids_peak}}},
      {"stdout", stream(r.out)},
      {"stderr", stream(r.err)},
      {"artifacts", artifacts},
      {"artifacts_truncated", artifacts_truncated},
      {"network", networkJson(ctx.network, ctx.network_mode)},
      {"isolation",
       {{"namespaces", r.isolation.namespaces},
        {"seccomp", r.isolation.seccomp},
        {"landlock", r.isolation.landlock},
        {"no_new_privs", r.isolation.no_new_privs},
        {"uid", r.isolation.uid},
        {"gid", r.isolation.gid},
        {"cgroup", r.isolation.cgroup}}},
      {"hash", hash ? json(*hash) : json(nullptr)},
  };
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
