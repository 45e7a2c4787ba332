// The daemon's Prometheus metrics (GET /metrics): names from DESIGN.md "sluice serve".
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sluice/serve/otlp.hpp"

namespace sluice::serve {

class Metrics {
 public:
  void runFinished() { runs_total_.fetch_add(1, std::memory_order_relaxed); }
  void sessionOpened() { sessions_active_.fetch_add(1, std::memory_order_relaxed); }
  void sessionClosed() { sessions_active_.fetch_sub(1, std::memory_order_relaxed); }
  /// One audit row of connections, requests or DNS, by its decision and reason.
  void decision(const std::string& decision, const std::string& reason);
  /// One attempt as receipts count them (docs/audit.md "What is counted"): `outcome` is
  /// "allowed", "denied" or "failed".
  void attempt(std::string_view outcome);
  /// One row a shadow policy (--shadow-policy-dir) decided too: whether it agreed.
  void shadow(bool agree) {
    (agree ? shadow_agree_ : shadow_disagree_).fetch_add(1, std::memory_order_relaxed);
  }
  void proxyBytes(std::uint64_t up, std::uint64_t down) {
    bytes_up_.fetch_add(up, std::memory_order_relaxed);
    bytes_down_.fetch_add(down, std::memory_order_relaxed);
  }
  void poolReady(const std::string& workflow, std::int64_t ready);
  /// A request or connection refused by admission (429, 503 at accept, 401, 413), by reason.
  void refused(const std::string& reason);
  /// Seconds from a run's request to its program's start.
  void runStart(double seconds);
  /// The text exposition; `audit_queue_depth` and the counters in `more` (the OpenTelemetry
  /// exporter's) are read by the caller at scrape time.
  std::string render(std::uint64_t audit_queue_depth,
                     const std::vector<CounterPoint>& more = {}) const;
  /// The counters of render() (not the gauges, not the histogram), for OTLP export; points of
  /// one name are adjacent.
  std::vector<CounterPoint> counters() const;

 private:
  static constexpr std::array<double, 12> kBuckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                      0.1,   0.25,   0.5,   1,    2.5,   5};
  std::atomic<std::uint64_t> runs_total_{0};
  std::atomic<std::int64_t> sessions_active_{0};
  std::atomic<std::uint64_t> bytes_up_{0}, bytes_down_{0};
  std::atomic<std::uint64_t> allowed_{0}, denied_{0}, failed_{0};
  std::atomic<std::uint64_t> shadow_agree_{0}, shadow_disagree_{0};
  mutable std::mutex mu_;
  std::map<std::pair<std::string, std::string>, std::uint64_t> decisions_;
  std::map<std::string, std::int64_t> pool_ready_;
  std::map<std::string, std::uint64_t> refused_;
  std::array<std::uint64_t, kBuckets.size()> start_buckets_{};
  std::uint64_t start_count_ = 0;
  double start_sum_ = 0;
};

}  // namespace sluice::serve
