// `sluice policy replay` and `sluice policy learn` over a large audit store: rows replayed per
// second (DESIGN.md: at least 100,000) and the time to learn a workflow from every execution.
// The store (1,000,000 rows unless SLUICE_REPLAY_ROWS says otherwise) is written once through
// the audit Store API with a realistic mix per execution of 100 rows: 10 DNS answers, 20 CONNECT
// tunnels (one in ten refused), 10 plain-HTTP origin connections carrying 60 requests (ids in
// the paths, one in twelve refused).
#include <benchmark/benchmark.h>
#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "sluice/audit/store.hpp"
#include "sluice/base/digest.hpp"
#include "sluice/policy/loader.hpp"
#include "sluice/replay/learn.hpp"
#include "sluice/replay/replay.hpp"

namespace {

namespace fs = std::filesystem;
using sluice::audit::ConnectionKind;
using sluice::audit::Decision;

constexpr const char* kPolicy =
    "apiVersion: sluice/v1\nkind: Workflow\nname: bench\negress:\n  rules:\n"
    "    - {id: pypi, action: allow, hosts: [files.pythonhosted.org, pypi.org], ports: [443]}\n"
    "    - {id: api, action: allow, hosts: [api.internal.test], ports: [80], methods: [GET, POST],"
    " paths: [\"/v1/*\"]}\n"
    "    - {id: no-admin, action: deny, hosts: [api.internal.test], ports: [80], paths: "
    "[\"/v1/admin/*\"], paths_case: insensitive}\n";
constexpr int kRowsPerExecution = 100;

// The directory (on a real disk) and the database, written once for every benchmark.
struct Store {
  fs::path dir;
  std::vector<std::string> executions;
  std::string error;
  std::uint64_t rows = 0;
  ~Store() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

sluice::audit::ConnectionEvent connection(const std::string& exec, int n, ConnectionKind kind) {
  sluice::audit::ConnectionEvent c;
  c.id = "c-" + exec + "-" + std::to_string(n);
  c.execution_id = exec;
  c.workflow = "bench";
  c.policy_sha256 = sluice::base::sha256Hex(kPolicy);
  c.ts_ms = 1'763'700'000'000 + n;
  c.kind = kind;
  const bool tunnel = kind == ConnectionKind::kConnect;
  c.host = tunnel ? (n % 2 ? "pypi.org" : "files.pythonhosted.org") : "api.internal.test";
  c.port = tunnel ? 443 : 80;
  c.resolved_ip = "151.101.0.223";
  const bool refused = tunnel && n % 10 == 9;
  if (refused) c.port = 8443;
  c.decision = refused ? Decision::kDeny : Decision::kAllow;
  c.rule_id = tunnel ? "pypi" : "api";
  c.reason = refused ? "port_not_allowed" : "allowed";
  c.tls = tunnel ? sluice::audit::TlsHandling::kPassthrough : sluice::audit::TlsHandling::kNone;
  return c;
}

sluice::audit::RequestEvent request(const std::string& exec, int conn, int n) {
  sluice::audit::RequestEvent r;
  r.connection_id = "c-" + exec + "-" + std::to_string(conn);
  r.execution_id = exec;
  r.workflow = "bench";
  r.ts_ms = 1'763'700'000'000 + n;
  r.method = n % 3 ? "GET" : "POST";
  r.host = "api.internal.test";
  const bool refused = n % 12 == 11;
  r.path = refused ? "/v1/admin/users" : "/v1/items/" + std::to_string(n * 7919);
  r.status = refused ? 403 : 200;
  r.decision = refused ? Decision::kDeny : Decision::kAllow;
  r.rule_id = refused ? "no-admin" : "api";
  r.reason = refused ? "denied_by_rule" : "allowed";
  return r;
}

void writeExecution(sluice::audit::Store& s, const std::string& exec) {
  int n = 0;
  for (int i = 0; i < 10; ++i) {
    sluice::audit::DnsEvent d;
    d.execution_id = exec;
    d.workflow = "bench";
    d.name = i % 2 ? "pypi.org" : "unknown.example";
    d.qtype = "A";
    d.decision = i % 2 ? Decision::kAllow : Decision::kDeny;
    d.rule_id = i % 2 ? "pypi" : "";
    d.reason = i % 2 ? "allowed" : "no_matching_rule";
    s.recordDns(d);
  }
  for (int i = 0; i < 20; ++i) s.recordConnection(connection(exec, n++, ConnectionKind::kConnect));
  for (int i = 0; i < 10; ++i) {
    const int conn = n++;
    for (int k = 0; k < 6; ++k) s.recordRequest(request(exec, conn, conn * 6 + k));
    s.recordConnection(connection(exec, conn, ConnectionKind::kHttp));
  }
}

Store& store() {
  static Store st = [] {
    Store s;
    const char* base = std::getenv("SLUICE_BENCH_DIR");
    std::string tmpl = std::string(base ? base : "/var/tmp") + "/sluice-replay-bench-XXXXXX";
    s.dir = ::mkdtemp(tmpl.data());
    const char* rows = std::getenv("SLUICE_REPLAY_ROWS");
    const long want = rows ? std::atol(rows) : 1'000'000;
    auto opened = sluice::audit::Store::open(s.dir / "audit.db");
    if (!opened) {
      s.error = opened.error().message;
      return s;
    }
    (*opened)->recordPolicy(sluice::base::sha256Hex(kPolicy), "bench", kPolicy);
    const long count = (want + kRowsPerExecution - 1) / kRowsPerExecution;
    // Each receipt is committed durably; queued together they share commits (learn needs them).
    std::vector<sluice::audit::ExecutionRecord> records(static_cast<std::size_t>(count));
    std::vector<sluice::audit::PendingExecution> pending;
    for (long e = 0; e < count; ++e) {
      auto& r = records[static_cast<std::size_t>(e)];
      r.id = "ex-" + std::to_string(e);
      r.workflow = "bench";
      r.policy_sha256 = sluice::base::sha256Hex(kPolicy);
      r.receipt_json = "{}";
      s.executions.push_back(r.id);
      writeExecution(**opened, r.id);
      pending.push_back((*opened)->beginRecordExecution(r));
    }
    for (auto& p : pending)
      if (auto w = p.wait(); !w) s.error = w.error().message;
    s.rows = s.executions.size() * kRowsPerExecution;
    return s;
  }();
  return st;
}

std::shared_ptr<const sluice::policy::Matcher> candidate() {
  auto w = sluice::policy::parseWorkflow(kPolicy, "bench.yaml");
  return sluice::policy::Matcher::compile(
      std::make_shared<const sluice::policy::Workflow>(std::move(*w)));
}

void BM_ReplayStore(benchmark::State& state) {
  Store& s = store();
  if (!s.error.empty()) return state.SkipWithError(s.error.c_str());
  auto m = candidate();
  for (auto _ : state) {
    auto h = sluice::replay::History::open(s.dir / "audit.db");
    auto r = sluice::replay::replay(*h, {{}, std::nullopt, "bench"}, *m);
    if (!r || r->counts.changed() != 0) state.SkipWithError("replay failed or changed");
    benchmark::DoNotOptimize(r);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * s.rows));
  state.counters["rows"] = static_cast<double>(s.rows);
}
BENCHMARK(BM_ReplayStore)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);

void BM_LearnStore(benchmark::State& state) {
  Store& s = store();
  if (!s.error.empty()) return state.SkipWithError(s.error.c_str());
  for (auto _ : state) {
    auto h = sluice::replay::History::open(s.dir / "audit.db");
    auto yaml = sluice::replay::learn(*h, s.executions, "bench-learned");
    if (!yaml) state.SkipWithError(yaml.error().message.c_str());
    benchmark::DoNotOptimize(yaml);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * s.rows));
  state.counters["rows"] = static_cast<double>(s.rows);
}
BENCHMARK(BM_LearnStore)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);

}  // namespace

BENCHMARK_MAIN();
