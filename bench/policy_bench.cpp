// policy_bench: how long one policy decision takes against workflows of 10, 100, 1,000 and
// 10,000 mixed rules (exact hosts, *.suffix wildcards, re: regexes, cidrs).
//
// Workflows are generated as YAML text and go through the real loader (parseWorkflow) and
// Matcher::compile, so the benchmark measures exactly what `sluice proxy` runs. Besides
// Google Benchmark's mean time per iteration, each decision benchmark times batches of
// kBatch decisions over a rotating set of distinct targets and reports the per-decision
// p50 and p99 of those batches as counters (`p50_ns`, `p99_ns`): the DESIGN.md target is
// p50 <= 1 us at 1,000 rules.
//
// Run: build-*/bench/policy_bench --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "shadow.hpp"  // proxy/src: the shadow decision of a row
#include "sluice/policy/loader.hpp"
#include "sluice/policy/matcher.hpp"
#include "sluice/policy/target.hpp"

namespace {

using sluice::policy::Matcher;
using sluice::policy::Target;
using sluice::policy::Visibility;

constexpr int kBatch = 32;            // decisions per timed sample
constexpr int kTargetsPerSet = 1024;  // distinct targets cycled through, so caches stay honest

// Rule mix, by index modulo 20: 8 exact, 6 *.suffix, 2 re:, 3 cidr, 1 deny; ordered so that
// even the 10-rule workflow holds every kind.
enum class Kind { kExact, kSuffix, kRegex, kCidr, kDeny };
Kind kindOf(int i) {
  using enum Kind;
  static constexpr Kind kMix[20] = {kExact, kSuffix, kCidr,   kRegex, kDeny,   kExact, kSuffix,
                                    kCidr,  kExact,  kSuffix, kExact, kSuffix, kCidr,  kRegex,
                                    kExact, kSuffix, kExact,  kExact, kSuffix, kExact};
  return kMix[i % 20];
}
// The deny rule at position 4 denies the host of the exact allow rule at position 5, so a
// deny hit is "deny beats allow"; exact-hit targets skip those hosts.
bool deniedExact(int i) { return i % 20 == 5; }

std::string exactHost(int i) { return "host" + std::to_string(i) + ".svc.example.com"; }
std::string suffixZone(int i) { return "zone" + std::to_string(i) + ".example.net"; }
std::string cidrPrefix(int i) {
  // Global unicast 20.0.0.0/8 onwards: no allow_private needed.
  return std::to_string(20 + (i >> 16)) + "." + std::to_string((i >> 8) & 255) + "." +
         std::to_string(i & 255);
}

// Every 100th rule (an exact one) is an inspected API with request conditions.
bool hasRequestConditions(int i) { return i % 100 == 0; }

std::string generateYaml(int rules) {
  std::string y = "apiVersion: sluice/v1\nkind: Workflow\nname: bench-" + std::to_string(rules) +
                  "\negress:\n  rules:\n";
  for (int i = 0; i < rules; ++i) {
    const std::string id = "r" + std::to_string(i);
    switch (kindOf(i)) {
      case Kind::kExact:
        y += "    - id: " + id + "\n      action: allow\n      hosts: [\"" + exactHost(i) + "\"]\n";
        if (hasRequestConditions(i)) {
          y += "      ports: [443]\n      tls: inspect\n      methods: [GET, POST]\n"
               "      paths: [\"/v1/*\", \"re:/healthz\"]\n";
        } else {
          y += "      ports: [443]\n";
        }
        break;
      case Kind::kSuffix:
        y += "    - id: " + id + "\n      action: allow\n      hosts: [\"*." + suffixZone(i) +
             "\"]\n      ports: [80, 443]\n";
        break;
      case Kind::kRegex:
        y += "    - id: " + id + "\n      action: allow\n      hosts: ['re:api" +
             std::to_string(i) + "-[a-z]+\\.example\\.org']\n      ports: [\"8000-8100\", 443]\n";
        break;
      case Kind::kCidr:
        y += "    - id: " + id + "\n      action: allow\n      cidrs: [\"" + cidrPrefix(i) +
             ".0/24\"]\n      ports: [443]\n";
        break;
      case Kind::kDeny:
        y += "    - id: " + id + "\n      action: deny\n      hosts: [\"" + exactHost(i + 1) +
             "\"]\n";
        break;
    }
  }
  return y;
}

std::shared_ptr<const Matcher> buildMatcher(int rules) {
  static std::map<int, std::shared_ptr<const Matcher>> cache;
  if (auto it = cache.find(rules); it != cache.end()) return it->second;
  auto wf = sluice::policy::parseWorkflow(generateYaml(rules), "bench.yaml");
  if (!wf) {
    std::fprintf(stderr, "policy_bench: generated workflow rejected:\n%s\n",
                 wf.error().str().c_str());
    std::abort();
  }
  auto m = Matcher::compile(std::make_shared<const sluice::policy::Workflow>(std::move(*wf)));
  cache.emplace(rules, m);
  return m;
}

Target mustTarget(const std::string& host, std::uint16_t port) {
  auto t = sluice::policy::makeTarget(host, port);
  if (!t) {
    std::fprintf(stderr, "policy_bench: bad target %s: %s\n", host.c_str(), t.error().c_str());
    std::abort();
  }
  return *t;
}

// Indices of rules of one kind, so targets spread over the whole workflow.
std::vector<int> rulesOfKind(int rules, Kind k, bool request_only = false) {
  std::vector<int> out;
  for (int i = 0; i < rules; ++i)
    if (kindOf(i) == k && (!request_only || hasRequestConditions(i))) out.push_back(i);
  return out;
}

enum class Set { kHitExact, kHitSuffix, kHitRegex, kHitCidr, kDenyRule, kMissHost, kMissIp };

std::vector<Target> targets(int rules, Set set) {
  std::vector<Target> out;
  out.reserve(kTargetsPerSet);
  std::vector<int> idx;
  switch (set) {
    case Set::kHitExact:
      for (int i : rulesOfKind(rules, Kind::kExact))
        if (!deniedExact(i)) idx.push_back(i);
      break;
    case Set::kHitSuffix:
      idx = rulesOfKind(rules, Kind::kSuffix);
      break;
    case Set::kHitRegex:
      idx = rulesOfKind(rules, Kind::kRegex);
      break;
    case Set::kHitCidr:
      idx = rulesOfKind(rules, Kind::kCidr);
      break;
    case Set::kDenyRule:
      idx = rulesOfKind(rules, Kind::kDeny);
      break;
    case Set::kMissHost:
    case Set::kMissIp:
      idx = {0};
      break;
  }
  if (idx.empty()) {
    std::fprintf(stderr, "policy_bench: no rules of the requested kind at %d\n", rules);
    std::abort();
  }
  for (int n = 0; n < kTargetsPerSet; ++n) {
    const int i = idx[(static_cast<std::size_t>(n) * 7919) % idx.size()];
    switch (set) {
      case Set::kHitExact:
        out.push_back(mustTarget(exactHost(i), 443));
        break;
      case Set::kHitSuffix:
        out.push_back(mustTarget("cdn" + std::to_string(n) + ".edge." + suffixZone(i), 443));
        break;
      case Set::kHitRegex:
        out.push_back(mustTarget("api" + std::to_string(i) + "-eu.example.org", 443));
        break;
      case Set::kHitCidr:
        out.push_back(mustTarget(cidrPrefix(i) + "." + std::to_string(1 + n % 250), 443));
        break;
      case Set::kDenyRule:
        out.push_back(mustTarget(exactHost(i + 1), 443));
        break;
      case Set::kMissHost:
        // Shares suffixes with the rules (example.com / example.net / example.org) so the
        // suffix walk and the regex set both have to run to the end.
        out.push_back(mustTarget("nohost" + std::to_string(n) + ".svc.example.com", 443));
        break;
      case Set::kMissIp:
        out.push_back(mustTarget("198.18." + std::to_string(n % 250) + ".9", 443));
        break;
    }
  }
  return out;
}

// Times batches of kBatch calls of `decide(i)`; reports per-decision p50/p99 as counters.
template <typename F>
void runTimed(benchmark::State& state, F&& decide) {
  std::vector<double> samples;
  samples.reserve(1 << 16);
  std::size_t i = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < kBatch; ++k) {
      auto d = decide(i++ % kTargetsPerSet);
      benchmark::DoNotOptimize(d.allowed);
    }
    const auto t1 = std::chrono::steady_clock::now();
    if (samples.size() < samples.capacity())
      samples.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / kBatch);
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
  if (!samples.empty()) {
    std::sort(samples.begin(), samples.end());
    state.counters["p50_ns"] = samples[samples.size() / 2];
    state.counters["p99_ns"] = samples[samples.size() * 99 / 100];
    double sum = 0;
    for (double v : samples) sum += v;
    state.counters["mean_ns"] = sum / static_cast<double>(samples.size());
  }
}

void connectBench(benchmark::State& state, Set set, bool expect_allowed) {
  const int rules = static_cast<int>(state.range(0));
  auto m = buildMatcher(rules);
  const auto ts = targets(rules, set);
  // Sanity: the benchmark measures what its name says.
  for (const auto& t : ts) {
    if (m->decide({t, Visibility::kTunnel}).allowed != expect_allowed) {
      state.SkipWithError(("unexpected decision for " + t.authority()).c_str());
      return;
    }
  }
  runTimed(state, [&](std::size_t i) { return m->decide({ts[i], Visibility::kTunnel}); });
}

void BM_ConnectHitExact(benchmark::State& s) { connectBench(s, Set::kHitExact, true); }
void BM_ConnectHitSuffix(benchmark::State& s) { connectBench(s, Set::kHitSuffix, true); }
void BM_ConnectHitRegex(benchmark::State& s) { connectBench(s, Set::kHitRegex, true); }
void BM_ConnectHitCidr(benchmark::State& s) { connectBench(s, Set::kHitCidr, true); }
void BM_ConnectDenyRule(benchmark::State& s) { connectBench(s, Set::kDenyRule, false); }
void BM_ConnectMissHost(benchmark::State& s) { connectBench(s, Set::kMissHost, false); }
void BM_ConnectMissIp(benchmark::State& s) { connectBench(s, Set::kMissIp, false); }

// Normalisation included: parse "host:port" as the proxy does for CONNECT, then decide.
void BM_ParseAndConnectHit(benchmark::State& state) {
  const int rules = static_cast<int>(state.range(0));
  auto m = buildMatcher(rules);
  std::vector<std::string> auths;
  for (const auto& t : targets(rules, Set::kHitExact)) auths.push_back(t.authority());
  runTimed(state, [&](std::size_t i) {
    auto t = sluice::policy::parseAuthority(auths[i]);
    return m->decide({*t, Visibility::kTunnel});
  });
}

// Targets spread over the exact-host rules that have request conditions (none if none do).
std::vector<Target> requestRuleTargets(int rules) {
  auto idx = rulesOfKind(rules, Kind::kExact, /*request_only=*/true);
  std::vector<Target> ts;
  if (idx.empty()) return ts;
  for (int n = 0; n < kTargetsPerSet; ++n)
    ts.push_back(mustTarget(exactHost(idx[(n * 7919) % idx.size()]), 443));
  return ts;
}

// Phase 3: a request inside an inspected tunnel, alternating allowed and refused paths.
void BM_Request(benchmark::State& state) {
  auto m = buildMatcher(static_cast<int>(state.range(0)));
  std::vector<Target> ts = requestRuleTargets(static_cast<int>(state.range(0)));
  if (ts.empty()) {
    state.SkipWithError("no rules with request conditions");
    return;
  }
  static const char* kPaths[] = {"/v1/metrics/cpu", "/v2/metrics", "/healthz", "/v1/a/b/c/d"};
  static const char* kMethods[] = {"GET", "POST", "DELETE", "GET"};
  std::vector<sluice::policy::HttpRequest> reqs;
  for (std::size_t i = 0; i < 16; ++i) reqs.push_back({kMethods[i % 4], kPaths[(i / 4) % 4], ""});
  runTimed(state, [&](std::size_t i) {
    return m->decide({ts[i], Visibility::kPlainHttp, &reqs[i % 16]});
  });
}

// The request as the proxy judges it: canonicalRequest (the canonical form and its refusals)
// on the request line's target, then the decision.
void BM_CanonicalRequest(benchmark::State& state) {
  auto m = buildMatcher(static_cast<int>(state.range(0)));
  std::vector<Target> ts = requestRuleTargets(static_cast<int>(state.range(0)));
  if (ts.empty()) {
    state.SkipWithError("no rules with request conditions");
    return;
  }
  // Spellings the canonical form accepts before and after its ambiguity checks (so that both
  // versions do the same work): escapes, dot segments, UTF-8, inner dots and spaces, case.
  static const char* kTargets[] = {
      "/v1/metrics/cpu?since=1h", "/v2/%6detrics",  "/healthz",    "/v1/a/./b/../c/d",
      "/v1/caf%C3%A9/x",          "/v1/a.b/c.json", "/v1/x%20y/z", "/V1/Metrics"};
  static const char* kMethods[] = {"GET", "POST", "DELETE", "GET"};
  for (const char* t : kTargets) {
    if (!sluice::policy::canonicalRequest("GET", t)) {
      state.SkipWithError((std::string("target refused: ") + t).c_str());
      return;
    }
  }
  runTimed(state, [&](std::size_t i) {
    auto req = sluice::policy::canonicalRequest(kMethods[i % 4], kTargets[i % 8]);
    if (!req) return sluice::policy::Decision{};
    return m->decide({ts[i], Visibility::kPlainHttp, &*req});
  });
}

// A shadow policy's cost per request (--shadow-policy): the candidate decides the requests row
// as the proxy writes it (proxy/src/shadow.hpp: target and canonical form from the row, then
// Matcher::decide), on top of the live decision. Must stay under a microsecond at 1,000 rules.
void BM_ShadowRequest(benchmark::State& state) {
  auto m = buildMatcher(static_cast<int>(state.range(0)));
  std::vector<Target> ts = requestRuleTargets(static_cast<int>(state.range(0)));
  if (ts.empty()) {
    state.SkipWithError("no rules with request conditions");
    return;
  }
  static const char* kPaths[] = {"/v1/metrics/cpu", "/v2/metrics", "/healthz", "/v1/a/b/c/d"};
  static const char* kMethods[] = {"GET", "POST", "DELETE", "GET"};
  std::vector<sluice::audit::RequestEvent> rows(kTargetsPerSet);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    rows[i].host = ts[i].host;
    rows[i].port = ts[i].port;
    rows[i].method = kMethods[i % 4];
    rows[i].path = kPaths[(i / 4) % 4];
  }
  struct Stamped {
    bool allowed;
  };
  runTimed(state, [&](std::size_t i) {
    sluice::proxy::stampShadow(m.get(), rows[i], nullptr, false);  // inside TLS, no address
    return Stamped{rows[i].stamp.shadow_decision == sluice::audit::Verdict::kAllow};
  });
}

// Loading cost: YAML parse + validation + compile, per workflow.
void BM_LoadAndCompile(benchmark::State& state) {
  const int rules = static_cast<int>(state.range(0));
  const std::string yaml = generateYaml(rules);
  for (auto _ : state) {
    auto wf = sluice::policy::parseWorkflow(yaml, "bench.yaml");
    if (!wf) {
      state.SkipWithError("generated workflow rejected");
      return;
    }
    auto m = Matcher::compile(std::make_shared<const sluice::policy::Workflow>(std::move(*wf)));
    benchmark::DoNotOptimize(m.get());
  }
  state.counters["rules"] = rules;
}

#define SLUICE_RULE_COUNTS Arg(10)->Arg(100)->Arg(1000)->Arg(10000)
BENCHMARK(BM_ConnectHitExact)->SLUICE_RULE_COUNTS;
BENCHMARK(BM_ConnectHitSuffix)->SLUICE_RULE_COUNTS;
BENCHMARK(BM_ConnectHitRegex)->SLUICE_RULE_COUNTS;
BENCHMARK(BM_ConnectHitCidr)->SLUICE_RULE_COUNTS;
BENCHMARK(BM_ConnectDenyRule)->SLUICE_RULE_COUNTS;
BENCHMARK(BM_ConnectMissHost)->SLUICE_RULE_COUNTS;
BENCHMARK(BM_ConnectMissIp)->SLUICE_RULE_COUNTS;
BENCHMARK(BM_ParseAndConnectHit)->SLUICE_RULE_COUNTS;
BENCHMARK(BM_Request)->SLUICE_RULE_COUNTS;
BENCHMARK(BM_CanonicalRequest)->SLUICE_RULE_COUNTS;
BENCHMARK(BM_ShadowRequest)->SLUICE_RULE_COUNTS;
BENCHMARK(BM_LoadAndCompile)->SLUICE_RULE_COUNTS->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
