// Audit store throughput: connection events per second committed into a WAL database on disk
// (batched writer thread), and the latency of one durable execution receipt (synchronous=FULL),
// each with signed checkpoints off and on (the last argument; default checkpoint options);
// and, for a 1,000,000-row store, the inclusion proof's size and the time to make and check it,
// and the time to open it with its key (the newest checkpoint is verified first).
#include <benchmark/benchmark.h>
#include <sqlite3.h>
#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "sluice/audit/evidence.hpp"
#include "sluice/audit/signing.hpp"
#include "sluice/audit/store.hpp"

namespace {

using sluice::audit::ConnectionEvent;
using sluice::audit::ExecutionRecord;
using sluice::audit::Store;

// The sustained-rate benchmarks and their raw SQLite ceiling run a fixed number of iterations
// (40,000 rows each), so every variant writes the same 160,000 rows into a fresh database.
// Left to Google Benchmark, the count followed each variant's speed (15 for one, 16 for
// another): the faster one wrote a bigger database, and each row costs more as it grows, so
// the ratios compared unequal work. Each iteration ends by waiting for its last commit, and the
// next starts with the store's writer idle until a batch is queued, which a sustained load does
// not pay: with 10,000 rows an iteration that was ~5% of the store's time (and the repetitions
// spread 10-15%, the commits' fsyncs falling unevenly into 16 short iterations); with 40,000,
// ~1.5%, and they spread ~4% (2026-11-27, late).
constexpr int kSustainedRows = 40'000;
constexpr benchmark::IterationCount kSustainedIterations = 4;

/// Store options with signing on (a fresh key, default checkpoint interval) or off.
sluice::audit::StoreOptions signing(bool on) {
  sluice::audit::StoreOptions o;
  if (on) o.signing_key = *sluice::audit::SigningKey::generate();
  return o;
}

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
  c.kind = sluice::audit::ConnectionKind::kConnect;
  c.host = "files.pythonhosted.org";
  c.port = 443;
  c.resolved_ip = "151.101.0.223";
  c.decision = n % 10 == 0 ? sluice::audit::Decision::kDeny : sluice::audit::Decision::kAllow;
  c.rule_id = "pypi";
  c.reason = "allowed";
  c.tls = sluice::audit::TlsHandling::kPassthrough;
  c.bytes_up = 1200;
  c.bytes_down = 48'000;
  c.duration_ms = 35;
  return c;
}

/// Sustained rate: each iteration enqueues kSustainedRows connection events from `producers`
/// threads and waits until all are committed, so the figure includes every commit.
void BM_ConnectionEventsSustained(benchmark::State& state) {
  const int producers = static_cast<int>(state.range(0));
  constexpr int kPerIteration = kSustainedRows;
  BenchDir dir;
  sluice::audit::StoreOptions options = signing(state.range(2) != 0);
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
// Args: producer threads, batch_rows, signing. "CPU" is the whole process (writer thread
// included).
BENCHMARK(BM_ConnectionEventsSustained)
    ->Args({1, 4096, 0})
    ->Args({1, 4096, 1})
    ->Args({4, 4096, 0})
    ->Args({4, 4096, 1})
    ->Args({1, 16384, 0})
    ->Iterations(kSustainedIterations)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MeasureProcessCPUTime();

/// A standalone proxy's rows for plain-HTTP request `n` on kept-alive connection `conn`: the
/// forwards row before it is sent and the requests row when it ends (proxy/src/audit_rows.cpp).
std::pair<sluice::audit::ForwardEvent, sluice::audit::RequestEvent> proxyRows(int conn, int n,
                                                                              int executions) {
  sluice::audit::RequestEvent r;
  r.connection_id = "c-888994b5-" + std::to_string(conn);
  // Executions' ids spread over the partial *_execution indexes as random ids do.
  if (executions > 0) {
    char id[32];
    std::snprintf(id, sizeof id, "ex-%016llx",
                  static_cast<unsigned long long>(conn % executions + 1) * 0x9E3779B97F4A7C15ull);
    r.execution_id = id;
  }
  r.workflow = "bench";
  r.ts_ms = 1'795'753'965'126 + n;
  r.method = "GET";
  r.host = "127.0.0.1";
  r.path = "/small";
  r.status = 200;
  r.decision = sluice::audit::Decision::kAllow;
  r.rule_id = "nginx";
  r.reason = "allowed";
  r.stamp.policy_generation = 1;
  return {sluice::audit::forwardOf(r), std::move(r)};
}

/// The store at the proxy's batch sizes: plain-HTTP requests (a forwards and a requests row
/// each) spread over `connections` kept-alive connections, a commit every `per_commit`
/// requests (flush(); `sluice proxy --threads 1` at ~27,000 requests/s fills a 5 ms batch
/// with ~135). Small commits cost more per row: each rewrites every page it touched, among
/// them one requests_connection leaf per connection (docs/benchmarks.md, "What each index
/// costs"). Items are requests; "CPU" is the whole process. With `executions` > 0 the rows
/// belong to that many executions, one per connection in turn (`sluice serve` running sessions
/// at once: 64 is its default --max-sessions), and with `cache_kib` > 0 the writer's page cache
/// is that size (`sluice serve`'s 1,024; 256 before 2026-11-27).
void BM_ProxyRequestRows(benchmark::State& state) {
  const int connections = static_cast<int>(state.range(0));
  const int per_commit = static_cast<int>(state.range(1));
  const int executions = static_cast<int>(state.range(2));
  const auto cache_kib = static_cast<unsigned>(state.range(3));
  constexpr int kCommitsPerIteration = 20;
  BenchDir dir;
  auto options = signing(false);
  if (cache_kib > 0) options.cache_kib = cache_kib;
  auto store = Store::open(dir.db(), options);
  if (!store) {
    state.SkipWithError(store.error().message.c_str());
    return;
  }
  int n = 0;
  for (auto _ : state) {
    for (int c = 0; c < kCommitsPerIteration; ++c) {
      for (int i = 0; i < per_commit; ++i, ++n) {
        auto [forward, request] = proxyRows(n % connections + 1, n, executions);
        (*store)->recordForward(std::move(forward));
        (*store)->recordRequest(std::move(request));
      }
      if (!(*store)->flush()) state.SkipWithError("flush failed");
    }
  }
  state.SetItemsProcessed(state.iterations() * kCommitsPerIteration * per_commit);
}
// Args: kept-alive connections, requests per commit, executions (0: none, as a standalone
// proxy writes), the writer's page cache in KiB (0: the default).
BENCHMARK(BM_ProxyRequestRows)
    ->Args({50, 135, 0, 0})
    ->Args({50, 540, 0, 0})
    ->Args({10, 135, 0, 0})
    ->Args({64, 135, 64, 0})
    ->Args({64, 135, 64, 1024})
    ->Args({64, 135, 64, 256})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MeasureProcessCPUTime();

/// The raw SQLite ceiling for BM_ConnectionEventsSustained: the very rows a store wrote (hash
/// chain columns included) inserted again into the same schema on the same disk, with one
/// prepared statement, transactions of 4,096 rows and the store's own pragmas (WAL,
/// synchronous=NORMAL, cache_size, wal_autocheckpoint), and nothing else: no queue, no hashing,
/// no chain head. What the store adds is the ratio of the two figures.
class RawConnections {
 public:
  /// Writes 64 events through a store at `db`, closes it, and reopens the file raw.
  explicit RawConnections(const std::filesystem::path& db) {
    {
      auto store = Store::open(db, signing(false));
      if (!store) return;
      for (int i = 0; i < 64; ++i) (*store)->recordConnection(event(i));
      if (!(*store)->flush()) return;
    }
    // NOMUTEX as the store opens its connection: one thread uses it.
    if (sqlite3_open_v2(db.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr) !=
        SQLITE_OK)
      return;
    const auto pragmas = "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA cache_size=-" +
                         std::to_string(sluice::audit::StoreOptions{}.cache_kib) +
                         "; PRAGMA wal_autocheckpoint=4096";
    ok_ = sqlite3_exec(db_, pragmas.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK &&
          loadRows() && prepareInsert();
  }
  ~RawConnections() {
    sqlite3_finalize(insert_);
    sqlite3_close(db_);
  }
  bool ok() const { return ok_; }

  /// Inserts `n` rows (copies of the 64, each with a new seq and id) in 4,096-row transactions.
  bool insert(int n) {
    for (int done = 0; done < n;) {
      if (sqlite3_exec(db_, "BEGIN", nullptr, nullptr, nullptr) != SQLITE_OK) return false;
      for (int i = 0; i < 4096 && done < n; ++i, ++done) {
        if (!insertOne(rows_[static_cast<std::size_t>(done) % rows_.size()])) return false;
      }
      if (sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr) != SQLITE_OK) return false;
    }
    return true;
  }

 private:
  // One column's value, decided once when the rows are loaded so that the timed loop only
  // binds (as the store's writer binds values it already holds).
  struct Cell {
    enum Kind { kSeq, kId, kNull, kInteger, kText } kind = kNull;
    std::int64_t integer = 0;
    std::string text;
  };
  using Row = std::vector<Cell>;

  // Every stored (not generated) column of the first 64 rows, as text (STRICT tables convert
  // integer text back on insert, as the store's own binding does not need to).
  bool loadRows() {
    sqlite3_stmt* info = nullptr;
    if (sqlite3_prepare_v2(db_,
                           "SELECT name, type FROM pragma_table_xinfo('connections') "
                           "WHERE hidden = 0",
                           -1, &info, nullptr) != SQLITE_OK)
      return false;
    while (sqlite3_step(info) == SQLITE_ROW) {
      columns_.emplace_back(reinterpret_cast<const char*>(sqlite3_column_text(info, 0)));
      integer_.push_back(std::string_view(reinterpret_cast<const char*>(
                             sqlite3_column_text(info, 1))) == "INTEGER");
    }
    sqlite3_finalize(info);
    std::string list;
    for (const auto& c : columns_) list += (list.empty() ? "" : ", ") + c;
    sqlite3_stmt* select = nullptr;
    if (sqlite3_prepare_v2(db_, ("SELECT " + list + " FROM connections").c_str(), -1, &select,
                           nullptr) != SQLITE_OK)
      return false;
    while (sqlite3_step(select) == SQLITE_ROW) {
      Row row;
      for (int i = 0; i < static_cast<int>(columns_.size()); ++i) {
        const auto column = static_cast<std::size_t>(i);
        const auto* t = reinterpret_cast<const char*>(sqlite3_column_text(select, i));
        Cell cell;
        if (columns_[column] == "seq") {
          cell.kind = Cell::kSeq;
        } else if (columns_[column] == "id") {
          cell.kind = Cell::kId;
        } else if (t == nullptr) {
          cell.kind = Cell::kNull;
        } else if (integer_[column]) {
          cell.kind = Cell::kInteger;
          cell.integer = std::stoll(t);
        } else {
          cell.kind = Cell::kText;
          cell.text = t;
        }
        row.push_back(std::move(cell));
      }
      rows_.push_back(std::move(row));
    }
    sqlite3_finalize(select);
    return !rows_.empty();
  }

  bool prepareInsert() {
    std::string list, params;
    for (std::size_t i = 0; i < columns_.size(); ++i) {
      list += (i ? ", " : "") + columns_[i];
      params += (i ? ", ?" : "?") + std::to_string(i + 1);
    }
    const auto sql = "INSERT INTO connections (" + list + ") VALUES (" + params + ")";
    return sqlite3_prepare_v2(db_, sql.c_str(), -1, &insert_, nullptr) == SQLITE_OK;
  }

  bool insertOne(const Row& row) {
    const std::string id = "raw-" + std::to_string(next_seq_);
    for (std::size_t i = 0; i < columns_.size(); ++i) {
      const int p = static_cast<int>(i + 1);
      const Cell& cell = row[i];
      switch (cell.kind) {
        case Cell::kSeq:
          sqlite3_bind_int64(insert_, p, next_seq_);
          break;
        case Cell::kId:
          sqlite3_bind_text(insert_, p, id.data(), static_cast<int>(id.size()), SQLITE_STATIC);
          break;
        case Cell::kNull:
          sqlite3_bind_null(insert_, p);
          break;
        case Cell::kInteger:
          sqlite3_bind_int64(insert_, p, cell.integer);
          break;
        case Cell::kText:
          sqlite3_bind_text(insert_, p, cell.text.data(), static_cast<int>(cell.text.size()),
                            SQLITE_STATIC);
          break;
      }
    }
    ++next_seq_;
    const int rc = sqlite3_step(insert_);
    sqlite3_reset(insert_);
    return rc == SQLITE_DONE;
  }

  sqlite3* db_ = nullptr;
  sqlite3_stmt* insert_ = nullptr;
  bool ok_ = false;
  std::vector<std::string> columns_;
  std::vector<bool> integer_;
  std::vector<Row> rows_;
  std::int64_t next_seq_ = 1'000'000;
};

/// The ceiling, measured like BM_ConnectionEventsSustained/1/4096/0 (kSustainedRows an
/// iteration).
void BM_RawSqliteCeiling(benchmark::State& state) {
  constexpr int kPerIteration = kSustainedRows;
  BenchDir dir;
  RawConnections raw(dir.db());
  if (!raw.ok()) {
    state.SkipWithError("cannot prepare the raw SQLite copy of the store");
    return;
  }
  for (auto _ : state) {
    if (!raw.insert(kPerIteration)) state.SkipWithError("raw insert failed");
  }
  state.SetItemsProcessed(state.iterations() * kPerIteration);
}
BENCHMARK(BM_RawSqliteCeiling)
    ->Iterations(kSustainedIterations)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MeasureProcessCPUTime();

/// One durable receipt: recordExecution returns after a synchronous=FULL commit (fsync).
void BM_DurableReceipt(benchmark::State& state) {
  BenchDir dir;
  auto store = Store::open(dir.db(), signing(state.range(0) != 0));
  if (!store) {
    state.SkipWithError(store.error().message.c_str());
    return;
  }
  ExecutionRecord r;
  r.workflow = "data-analysis";
  r.argv_json = R"j(["python3","-c","print(1)"])j";
  r.usage_json = R"({"cpu_user_ms":10,"cpu_sys_ms":2,"max_rss_bytes":1048576,"pids_peak":1})";
  r.artifacts_json = "[]";
  // A typical receipt's size; JSON, since caller/session_id are generated from it.
  r.receipt_json = R"({"execution_id":"e","pad":")" + std::string(1450, 'r') + "\"}";
  int n = 0;
  for (auto _ : state) {
    r.id = "exec-" + std::to_string(n++);
    auto h = (*store)->recordExecution(r);
    if (!h) state.SkipWithError(h.error().message.c_str());
  }
}
// Arg: signing.
BENCHMARK(BM_DurableReceipt)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();

/// A 1,000,000-row signed store (999,999 connections and one execution in the middle), built
/// once for the proof benchmarks.
struct MillionRows {
  BenchDir dir;
  std::shared_ptr<const sluice::audit::SigningKey> key = *sluice::audit::SigningKey::generate();
  std::shared_ptr<const sluice::audit::PublicKey> pub =
      *sluice::audit::PublicKey::fromPem(key->publicKeyPem(), "bench");
  std::string proof;
  MillionRows() {
    sluice::audit::StoreOptions o;
    o.signing_key = key;
    auto store = Store::open(dir.db(), o);
    if (!store) return;
    for (int i = 0; i < 500'000; ++i) (*store)->recordConnection(event(i));
    ExecutionRecord r;
    r.id = "exec-middle";
    r.workflow = "data-analysis";
    r.artifacts_json = "[]";
    r.receipt_json = R"({"execution_id":"exec-middle"})";
    (void)(*store)->recordExecution(r);
    for (int i = 500'000; i < 999'999; ++i) (*store)->recordConnection(event(i));
  }
  static MillionRows& get() {
    static MillionRows m;
    return m;
  }
};

/// `sluice audit prove` on a 1,000,000-row store: reads every leaf up to the checkpoint.
void BM_Prove1M(benchmark::State& state) {
  MillionRows& m = MillionRows::get();
  for (auto _ : state) {
    auto p = sluice::audit::proveExecution(m.dir.db(), "exec-middle");
    if (!p) {
      state.SkipWithError(p.error().message.c_str());
      return;
    }
    m.proof = *p;
  }
  auto path = nlohmann::json::parse(m.proof)["audit_path"];
  state.counters["proof_bytes"] = static_cast<double>(m.proof.size());
  state.counters["path_hashes"] = static_cast<double>(path.size());
}
BENCHMARK(BM_Prove1M)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);

/// `sluice audit check-proof`: no database, the row hash, ~20 node hashes and one Ed25519
/// verification.
void BM_CheckProof1M(benchmark::State& state) {
  MillionRows& m = MillionRows::get();
  if (m.proof.empty())
    m.proof = sluice::audit::proveExecution(m.dir.db(), "exec-middle").value_or("");
  for (auto _ : state) {
    auto c = sluice::audit::checkProof(m.proof, *m.pub);
    if (!c.ok) state.SkipWithError(c.reason.c_str());
  }
  state.counters["proof_bytes"] = static_cast<double>(m.proof.size());
}
BENCHMARK(BM_CheckProof1M)->Unit(benchmark::kMicrosecond)->UseRealTime();

/// `sluice audit verify --pubkey` over the whole 1,000,000-row store.
void BM_VerifySigned1M(benchmark::State& state) {
  MillionRows& m = MillionRows::get();
  for (auto _ : state) {
    auto v = sluice::audit::verify(m.dir.db(), m.pub.get());
    if (!v || !v->ok) state.SkipWithError("verify failed");
  }
}
BENCHMARK(BM_VerifySigned1M)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);

/// Opening a signed 1,000,000-row store with its key, as every `sluice run --signing-key` does:
/// the newest checkpoint (position 1,000,000 = 15,625 x 64) is verified (its signature, its
/// frontier, and its last subtree's 64 rows) before anything is written. No row is written, so
/// the store stays the same from one iteration to the next.
void BM_OpenSigned1M(benchmark::State& state) {
  MillionRows& m = MillionRows::get();
  sluice::audit::StoreOptions o;
  o.signing_key = m.key;
  for (auto _ : state) {
    auto store = Store::open(m.dir.db(), o);
    if (!store) {
      state.SkipWithError(store.error().message.c_str());
      return;
    }
    state.PauseTiming();
    store->reset();  // closing is not opening
    state.ResumeTiming();
  }
}
BENCHMARK(BM_OpenSigned1M)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(20);

/// The first write after opening it: one durable receipt (what `sluice run` writes), then the
/// close with its checkpoint. Timed: the receipt alone; `open_ms` and `close_ms` beside it.
void BM_FirstWriteAfterOpen1M(benchmark::State& state) {
  MillionRows& m = MillionRows::get();
  sluice::audit::StoreOptions o;
  o.signing_key = m.key;
  o.checkpoint_on_close = false;  // as `sluice run`
  ExecutionRecord r;
  r.workflow = "data-analysis";
  r.artifacts_json = "[]";
  r.receipt_json = R"({"execution_id":"e"})";
  double open_ms = 0, close_ms = 0;
  static int n = 0;  // across repetitions too: the ids go into the one database
  for (auto _ : state) {
    state.PauseTiming();
    auto t0 = std::chrono::steady_clock::now();
    auto store = Store::open(m.dir.db(), o);
    open_ms +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!store) {
      state.SkipWithError(store.error().message.c_str());
      return;
    }
    r.id = "exec-first-write-" + std::to_string(n++);
    state.ResumeTiming();
    auto h = (*store)->recordExecution(r);
    state.PauseTiming();
    if (!h) {
      state.SkipWithError(h.error().message.c_str());
      return;
    }
    t0 = std::chrono::steady_clock::now();
    store->reset();
    close_ms +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    state.ResumeTiming();
  }
  state.counters["open_ms"] = open_ms / static_cast<double>(state.iterations());
  state.counters["close_ms"] = close_ms / static_cast<double>(state.iterations());
}
BENCHMARK(BM_FirstWriteAfterOpen1M)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(20);

/// The worst case of that check: a newest checkpoint at a power of two (2^20 = 1,048,576 rows,
/// where a store signing every 65,536 rows stops without a checkpoint at close, e.g. killed),
/// whose last subtree is the whole tree: every row's hash is read once.
void BM_OpenSignedPowerOfTwo(benchmark::State& state) {
  BenchDir dir;
  auto key = *sluice::audit::SigningKey::generate();
  sluice::audit::StoreOptions o;
  o.signing_key = key;
  {
    auto store = Store::open(dir.db(), o);
    if (!store) return state.SkipWithError(store.error().message.c_str());
    for (int i = 0; i < (1 << 20); ++i) (*store)->recordConnection(event(i));
  }
  for (auto _ : state) {
    auto store = Store::open(dir.db(), o);
    if (!store) return state.SkipWithError(store.error().message.c_str());
    state.PauseTiming();
    store->reset();
    state.ResumeTiming();
  }
}
BENCHMARK(BM_OpenSignedPowerOfTwo)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(5);

}  // namespace

BENCHMARK_MAIN();
