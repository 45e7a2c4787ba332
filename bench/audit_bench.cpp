// Audit store throughput: connection events per second committed into a WAL database on disk
// (batched writer thread), and the latency of one durable execution receipt (synchronous=FULL).
#include <benchmark/benchmark.h>
#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "sluice/audit/store.hpp"

namespace {

using sluice::audit::ConnectionEvent;
using sluice::audit::ExecutionRecord;
using sluice::audit::Store;

/// A fresh directory on a real disk (not tmpfs), removed afterwards.
class BenchDir {
 public:
  BenchDir() {
    const char* base = std::getenv("SLUICE_BENCH_DIR");
    std::string tmpl = std::string(base ? base : "/var/tmp") + "/sluice-audit-bench-XXXXXX";
    path_ = ::mkdtemp(tmpl.data());
  }
  ~BenchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::filesystem::path db() const { return path_ / "audit.db"; }

 private:
  std::filesystem::path path_;
};

ConnectionEvent event(int n) {
  ConnectionEvent c;
  c.id = "c-0123456789abcdef-" + std::to_string(n);
  c.execution_id = "0123456789abcdef";
  c.workflow = "data-analysis";
  c.policy_sha256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
  c.ts_ms = 1'763'700'000'000 + n;
  c.kind = "connect";
  c.host = "files.pythonhosted.org";
  c.port = 443;
  c.resolved_ip = "151.101.0.223";
  c.decision = n % 10 == 0 ? "deny" : "allow";
  c.rule_id = "pypi";
  c.reason = "allowed";
  c.tls = "passthrough";
  c.bytes_up = 1200;
  c.bytes_down = 48'000;
  c.duration_ms = 35;
  return c;
}

/// Sustained rate: each iteration enqueues 10,000 connection events from `producers` threads
/// and waits until all are committed, so the figure includes every commit.
void BM_ConnectionEventsSustained(benchmark::State& state) {
  const int producers = static_cast<int>(state.range(0));
  constexpr int kPerIteration = 10'000;
  BenchDir dir;
  sluice::audit::StoreOptions options;
  options.batch_rows = static_cast<std::size_t>(state.range(1));
  auto store = Store::open(dir.db(), options);
  if (!store) {
    state.SkipWithError(store.error().message.c_str());
    return;
  }
  std::vector<ConnectionEvent> events;
  for (int i = 0; i < 64; ++i) events.push_back(event(i));
  for (auto _ : state) {
    std::vector<std::thread> threads;
    for (int p = 0; p < producers; ++p) {
      threads.emplace_back([&, p] {
        for (int i = p; i < kPerIteration; i += producers)
          (*store)->recordConnection(events[i % 64]);
      });
    }
    for (auto& t : threads) t.join();
    if (!(*store)->flush()) state.SkipWithError("flush failed");
  }
  state.SetItemsProcessed(state.iterations() * kPerIteration);
}
// Args: producer threads, batch_rows. "CPU" is the whole process (writer thread included).
BENCHMARK(BM_ConnectionEventsSustained)
    ->Args({1, 4096})
    ->Args({4, 4096})
    ->Args({1, 16384})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MeasureProcessCPUTime();

/// One durable receipt: recordExecution returns after a synchronous=FULL commit (fsync).
void BM_DurableReceipt(benchmark::State& state) {
  BenchDir dir;
  auto store = Store::open(dir.db());
  if (!store) {
    state.SkipWithError(store.error().message.c_str());
    return;
  }
  ExecutionRecord r;
  r.workflow = "data-analysis";
  r.argv_json = R"j(["python3","-c","print(1)"])j";
  r.usage_json = R"({"cpu_user_ms":10,"cpu_sys_ms":2,"max_rss_bytes":1048576,"pids_peak":1})";
  r.artifacts_json = "[]";
  r.receipt_json = std::string(1500, 'r');  // a typical receipt's size
  int n = 0;
  for (auto _ : state) {
    r.id = "exec-" + std::to_string(n++);
    auto h = (*store)->recordExecution(r);
    if (!h) state.SkipWithError(h.error().message.c_str());
  }
}
BENCHMARK(BM_DurableReceipt)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
