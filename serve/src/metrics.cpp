// Prometheus text exposition format 0.0.4 (metrics.hpp).
#include "metrics.hpp"

#include <cstdio>

namespace sluice::serve {
namespace {

// Label values escape backslash, double quote and newline.
std::string label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

}  // namespace

void Metrics::decision(const std::string& decision, const std::string& reason) {
  std::lock_guard lock(mu_);
  ++decisions_[{decision, reason}];
}

void Metrics::attempt(std::string_view outcome) {
  auto& n = outcome == "allowed" ? allowed_ : outcome == "denied" ? denied_ : failed_;
  n.fetch_add(1, std::memory_order_relaxed);
}

void Metrics::poolReady(const std::string& workflow, std::int64_t ready) {
  std::lock_guard lock(mu_);
  pool_ready_[workflow] = ready;
}

void Metrics::refused(const std::string& reason) {
  std::lock_guard lock(mu_);
  ++refused_[reason];
}

void Metrics::runStart(double seconds) {
  std::lock_guard lock(mu_);
  for (std::size_t i = 0; i < kBuckets.size(); ++i)
    if (seconds <= kBuckets[i]) ++start_buckets_[i];
  ++start_count_;
  start_sum_ += seconds;
}

std::string Metrics::render(std::uint64_t audit_queue_depth,
                            const std::vector<CounterPoint>& more) const {
  std::string o;
  o += "# HELP sluice_runs_total Executions finished (one-shot runs and session execs).\n";
  o += "# TYPE sluice_runs_total counter\n";
  o += "sluice_runs_total " + std::to_string(runs_total_.load()) + "\n";
  o += "# HELP sluice_sessions_active Sessions open now.\n";
  o += "# TYPE sluice_sessions_active gauge\n";
  o += "sluice_sessions_active " + std::to_string(sessions_active_.load()) + "\n";
  o += "# HELP sluice_proxy_bytes_total Bytes relayed by the proxy for finished connections.\n";
  o += "# TYPE sluice_proxy_bytes_total counter\n";
  o += "sluice_proxy_bytes_total{direction=\"out\"} " + std::to_string(bytes_up_.load()) + "\n";
  o += "sluice_proxy_bytes_total{direction=\"in\"} " + std::to_string(bytes_down_.load()) + "\n";
  o += "# HELP sluice_audit_queue_depth Audit events queued, not yet committed.\n";
  o += "# TYPE sluice_audit_queue_depth gauge\n";
  o += "sluice_audit_queue_depth " + std::to_string(audit_queue_depth) + "\n";
  o += "# HELP sluice_network_attempts_total What executions tried to reach, counted as receipts "
       "count allowed, denied and failed.\n";
  o += "# TYPE sluice_network_attempts_total counter\n";
  o += "sluice_network_attempts_total{outcome=\"allowed\"} " + std::to_string(allowed_.load()) +
       "\n";
  o += "sluice_network_attempts_total{outcome=\"denied\"} " + std::to_string(denied_.load()) + "\n";
  o += "sluice_network_attempts_total{outcome=\"failed\"} " + std::to_string(failed_.load()) + "\n";
  o += "# HELP sluice_shadow_decisions_total Rows a shadow policy decided too, by whether it "
       "agreed with the decision (audit query --shadow-diff lists the others).\n";
  o += "# TYPE sluice_shadow_decisions_total counter\n";
  o += "sluice_shadow_decisions_total{agree=\"true\"} " + std::to_string(shadow_agree_.load()) +
       "\n";
  o += "sluice_shadow_decisions_total{agree=\"false\"} " + std::to_string(shadow_disagree_.load()) +
       "\n";
  std::lock_guard lock(mu_);
  o += "# HELP sluice_decisions_total Audit rows of connections, requests and DNS queries, by "
       "decision (allow, deny, fail) and reason.\n";
  o += "# TYPE sluice_decisions_total counter\n";
  for (const auto& [k, n] : decisions_)
    o += "sluice_decisions_total{decision=\"" + label(k.first) + "\",reason=\"" + label(k.second) +
         "\"} " + std::to_string(n) + "\n";
  o += "# HELP sluice_pool_ready Prepared sandboxes waiting, per workflow.\n";
  o += "# TYPE sluice_pool_ready gauge\n";
  for (const auto& [w, n] : pool_ready_)
    o += "sluice_pool_ready{workflow=\"" + label(w) + "\"} " + std::to_string(n) + "\n";
  o += "# HELP sluice_api_refusals_total Requests and connections refused by admission.\n";
  o += "# TYPE sluice_api_refusals_total counter\n";
  for (const auto& [reason, n] : refused_)
    o += "sluice_api_refusals_total{reason=\"" + label(reason) + "\"} " + std::to_string(n) + "\n";
  o += "# HELP sluice_run_start_seconds From a run's request to its program's start.\n";
  o += "# TYPE sluice_run_start_seconds histogram\n";
  for (std::size_t i = 0; i < kBuckets.size(); ++i)
    o += "sluice_run_start_seconds_bucket{le=\"" + number(kBuckets[i]) + "\"} " +
         std::to_string(start_buckets_[i]) + "\n";
  o += "sluice_run_start_seconds_bucket{le=\"+Inf\"} " + std::to_string(start_count_) + "\n";
  o += "sluice_run_start_seconds_sum " + number(start_sum_) + "\n";
  o += "sluice_run_start_seconds_count " + std::to_string(start_count_) + "\n";
  for (const CounterPoint& p : more) {
    // Counters without attributes (the exporter's): one sample each.
    o += "# HELP " + p.name + " " + p.description + "\n";
    o += "# TYPE " + p.name + " counter\n";
    o += p.name + " " + std::to_string(p.value) + "\n";
  }
  return o;
}

std::vector<CounterPoint> Metrics::counters() const {
  std::vector<CounterPoint> out;
  out.push_back({"sluice_runs_total", "Executions finished.", {}, runs_total_.load()});
  const char* bytes = "Bytes relayed by the proxy for finished connections.";
  out.push_back({"sluice_proxy_bytes_total", bytes, {{"direction", "out"}}, bytes_up_.load()});
  out.push_back({"sluice_proxy_bytes_total", bytes, {{"direction", "in"}}, bytes_down_.load()});
  const char* attempts = "What executions tried to reach, as receipts count it.";
  for (auto [outcome, n] : {std::pair{"allowed", &allowed_}, std::pair{"denied", &denied_},
                            std::pair{"failed", &failed_}})
    out.push_back({"sluice_network_attempts_total", attempts, {{"outcome", outcome}}, n->load()});
  std::lock_guard lock(mu_);
  for (const auto& [k, n] : decisions_)
    out.push_back({"sluice_decisions_total",
                   "Audit rows of connections, requests and DNS queries.",
                   {{"decision", k.first}, {"reason", k.second}},
                   n});
  for (const auto& [reason, n] : refused_)
    out.push_back({"sluice_api_refusals_total",
                   "Requests and connections refused by admission.",
                   {{"reason", reason}},
                   n});
  return out;
}

}  // namespace sluice::serve
