// What TLS inspection costs on the CA side: minting a leaf for a host seen for the first time
// (EC P-256 key + signature, a cache miss) versus serving a cached leaf (an LRU hit), single
// threaded and with several threads asking for the same few hosts.
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "sluice/proxy/certificate_authority.hpp"

namespace {

using sluice::proxy::CertificateAuthority;

// Every iteration asks for a host never seen before, so each one mints.
void BM_LeafMint(benchmark::State& state) {
  auto ca = CertificateAuthority::createEphemeral("bench CA", std::chrono::hours(24), 1024);
  if (!ca) {
    state.SkipWithError(ca.error().c_str());
    return;
  }
  std::uint64_t n = 0;
  for (auto _ : state) {
    auto leaf = (*ca)->leafFor("h" + std::to_string(n++) + ".mint.example");
    if (!leaf) {
      state.SkipWithError(leaf.error().c_str());
      break;
    }
    benchmark::DoNotOptimize(leaf->get());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(BM_LeafMint)->Unit(benchmark::kMicrosecond);

// A working set of hosts that fits in the cache: after the first round every call is a hit.
void BM_LeafCacheHit(benchmark::State& state) {
  auto ca = CertificateAuthority::createEphemeral("bench CA", std::chrono::hours(24), 1024);
  if (!ca) {
    state.SkipWithError(ca.error().c_str());
    return;
  }
  std::vector<std::string> hosts;
  for (int i = 0; i < state.range(0); ++i) hosts.push_back("api" + std::to_string(i) + ".example");
  for (const auto& h : hosts) (void)(*ca)->leafFor(h);  // warm
  std::size_t i = 0;
  for (auto _ : state) {
    auto leaf = (*ca)->leafFor(hosts[i++ % hosts.size()]);
    benchmark::DoNotOptimize(leaf->get());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(BM_LeafCacheHit)->Arg(1)->Arg(100)->Arg(1000)->Unit(benchmark::kNanosecond);

// Contended hits: every thread asks the shared CA for the same small set of hosts.
void BM_LeafCacheHitThreads(benchmark::State& state) {
  static std::shared_ptr<CertificateAuthority> ca;
  static std::vector<std::string> hosts;
  if (state.thread_index() == 0) {
    ca = *CertificateAuthority::createEphemeral("bench CA", std::chrono::hours(24), 1024);
    hosts.clear();
    for (int i = 0; i < 16; ++i) hosts.push_back("api" + std::to_string(i) + ".example");
    for (const auto& h : hosts) (void)ca->leafFor(h);
  }
  std::size_t i = static_cast<std::size_t>(state.thread_index());
  for (auto _ : state) {
    auto leaf = ca->leafFor(hosts[i++ % hosts.size()]);
    benchmark::DoNotOptimize(leaf->get());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
  if (state.thread_index() == 0) ca.reset();
}
BENCHMARK(BM_LeafCacheHitThreads)->Threads(1)->Threads(2)->Threads(4)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
