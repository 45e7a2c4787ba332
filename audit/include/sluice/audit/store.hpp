// The SQLite audit store: one writer thread, a bounded queue with backpressure, batched WAL
// commits, durable execution receipts and one SHA-256 hash chain across executions,
// connections and requests. Schema: schemas/audit.sql; encoding and semantics: docs/audit.md.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <expected>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "sluice/audit/event_sink.hpp"
#include "sluice/base/error.hpp"

namespace sluice::audit {

/// The schema version this build writes (`PRAGMA user_version`). Older databases are migrated
/// on open; newer or foreign ones are refused.
inline constexpr int kSchemaVersion = 10;

class SigningKey;  // sluice/audit/signing.hpp
class PublicKey;

struct StoreOptions {
  /// Events the queue holds before producers block (backpressure; never dropped).
  std::size_t queue_capacity = 65536;
  /// A batch is committed when it reaches this many rows ...
  std::size_t batch_rows = 4096;
  /// ... or when its oldest row has waited this long, whichever comes first.
  std::chrono::milliseconds batch_interval{5};
  /// Open without a writer (for inspection); every record* call then fails.
  bool read_only = false;
  /// Copy the WAL into the database file (one fsync of it) when the store closes, so the .db
  /// file alone holds every row. false (`sluice run`, ~0.1 ms off every run): a later writer
  /// copies them when it opens with more than 256 KiB in the WAL, off its caller's path; until
  /// then the rows are safe in the -wal file, which SQLite and sluice read as part of the
  /// database, but a copy of the .db file alone lacks the last sessions' rows.
  bool checkpoint_on_close = true;
  /// How long a write waits for a lock held by another connection (another process's
  /// writer, an auditor's long read is no obstacle in WAL) before the store fails.
  std::chrono::milliseconds busy_timeout{5000};
  /// SQLite's page cache of the writer connection, in KiB. Rows are appended, so what a batch
  /// touches is the last pages of each table and index (for the `*_execution` indexes, one leaf
  /// per execution writing rows at the time), and a full batch's dirty pages (4,096 rows, about
  /// 300 pages) must fit without spilling; 4 MiB (1,024 pages) holds both several times over. A
  /// bigger cache buys no fewer reads, and a cache still filling costs the writer a page fault
  /// per new page and the whole process the heap's growth (docs/benchmarks.md, "The audit
  /// writer's page cache"). A long-running daemon that writes a row now and then wants a
  /// smaller one still: its RSS grows with the database up to this size.
  unsigned cache_kib = 4096;
  /// Permissions of a database file the store creates (its -wal and -shm files copy them):
  /// 0600, the owner only, because the rows hold argv, URLs and hosts. An existing file keeps
  /// its mode; one readable by others is logged as a warning.
  unsigned file_mode = 0600;
  /// With a group (a gid >= 0), a new file gets that group and mode 0640, so members of it
  /// (auditors) can read it (`--audit-group`).
  int group = -1;
  /// With a key (`--signing-key`), the writer keeps an RFC 9162 Merkle tree over the chain and
  /// adds a signed `checkpoints` row every `checkpoint_rows` rows or `checkpoint_interval`,
  /// whichever comes first, and when it closes (docs/audit.md, "Signed checkpoints"). The key
  /// stays in this process: it is never written to the database or logged.
  std::shared_ptr<const SigningKey> signing_key;
  std::size_t checkpoint_rows = 65536;
  std::chrono::milliseconds checkpoint_interval{30000};
};

/// One finished execution. `receipt_json` is the full receipt (DESIGN.md "Receipt"); the other
/// fields are its queryable columns. JSON-typed fields hold JSON text ("" is stored as null).
struct ExecutionRecord {
  std::string id;
  std::string workflow;
  std::string policy_sha256;
  std::string argv_json;           // JSON array of strings
  std::int64_t started_at_ms = 0;  // Unix epoch milliseconds
  std::int64_t ended_at_ms = 0;
  int exit_code = 0;
  int signal = 0;          // 0 = not killed by a signal
  std::string limit_hit;   // "" = null; else timeout|cpu|memory|pids|output|disk|file_size
  std::string usage_json;  // {"cpu_user_ms":..,"cpu_sys_ms":..,"max_rss_bytes":..,..}
  std::uint64_t stdout_bytes = 0;
  std::uint64_t stderr_bytes = 0;
  bool stdout_truncated = false;
  bool stderr_truncated = false;
  std::string artifacts_json;  // JSON array [{path, bytes, sha256}]
  std::string receipt_json;
};

/// Why verify failed: a broken chain or checkpoint, or (with a public key) a log with no
/// checkpoint, an unsigned tail refused by `require_signed_tail`, or a history that does not
/// extend a kept checkpoint.
enum class VerifyFailure { kNone, kBroken, kUnsigned, kUnsignedTail, kRewritten };

/// The outcome of walking the hash chain.
struct VerifyResult {
  VerifyFailure failure = VerifyFailure::kNone;
  /// The database is in WAL mode but its -wal file is absent: a copy taken without it lacks the
  /// rows not yet copied into the main file (verify warns; see docs/audit.md).
  bool wal_missing = false;
  bool ok = false;
  std::uint64_t rows = 0;                 // rows checked (every chained table)
  std::string first_broken;               // "" when ok; else "<table> id <N>: <why>"
  std::uint64_t checkpoints = 0;          // checkpoints whose root was recomputed and matched
  bool signatures_checked = false;        // a public key was given and every signature held
  std::int64_t last_signed_position = 0;  // the highest position a good checkpoint covers
  std::uint64_t unsigned_tail = 0;        // rows after it
};

/// A durable execution commit in flight (Store::beginRecordExecution). Its record must stay
/// alive until wait() returns; destroying it unwaited waits.
class PendingExecution {
 public:
  PendingExecution(PendingExecution&&) noexcept;
  PendingExecution& operator=(PendingExecution&&) noexcept;
  ~PendingExecution();
  /// Waits for the commit: the executions row's hash (hex SHA-256), or the error.
  std::expected<std::string, base::Error> wait();

  struct State;

 private:
  friend class Store;
  explicit PendingExecution(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

/// The audit store. Thread-safe: any number of producers may call the record* functions
/// concurrently. One internal writer thread owns the only write connection.
///
/// Failure (disk full, I/O error, database locked by a foreign writer for too long) is sticky:
/// healthy() turns false, failure() says why, later events are discarded with the store
/// already marked failed, and recordExecution()/flush() return the error. Producers must
/// check healthy() and fail closed.
class Store final : public EventSink {
 public:
  /// Opens (creating if missing, unless read_only) the database at `db`, applies WAL mode,
  /// checks or migrates the schema and starts the writer thread.
  static std::expected<std::unique_ptr<Store>, base::Error> open(const std::filesystem::path& db,
                                                                 StoreOptions options = {});

  /// Like open() for a writer, but returns at once: the writer thread opens, checks and
  /// migrates the database while the caller goes on (`sluice run` overlaps it with building
  /// the sandbox). Events recorded meanwhile are queued. ready() waits for the open and
  /// returns its error; a store whose open failed is failed (healthy() false, every record*
  /// call refused), exactly as if it had failed later.
  static std::unique_ptr<Store> openAsync(const std::filesystem::path& db,
                                          StoreOptions options = {});

  /// Waits until the database is open (at once for open()); the open's error, if it failed.
  std::expected<void, base::Error> ready();

  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;
  /// Drains the queue, commits everything and closes the database.
  ~Store() override;

  /// Durable: returns only after the executions row, and every event queued before it, is
  /// committed with synchronous=FULL. Returns the row's hash (hex SHA-256) for the receipt.
  std::expected<std::string, base::Error> recordExecution(const ExecutionRecord& record);

  /// recordExecution() in two halves: queued now, waited for later, so the caller can do other
  /// work while the commit's fsync runs (`sluice run` tears the sandbox down meanwhile).
  PendingExecution beginRecordExecution(const ExecutionRecord& record);

  /// Waits until everything queued before the call is committed (synchronous=NORMAL).
  std::expected<void, base::Error> flush();

  // EventSink. These block when the queue is full (backpressure) and never drop an event
  // while the store is healthy.
  void recordPolicy(const std::string& sha256, const std::string& workflow,
                    const std::string& yaml_text) override;
  void recordConnection(ConnectionEvent event) override;
  void recordRequest(RequestEvent event) override;
  void recordForward(ForwardEvent event) override;
  void recordDns(DnsEvent event) override;
  void recordApproval(ApprovalEvent event) override;
  bool healthy() const override;

  /// Events queued and not yet taken by the writer (a gauge for `sluice serve`'s metrics).
  std::size_t queueDepth() const;
  /// Why the store failed, if it did.
  std::optional<base::Error> failure() const;

  /// The database path given to open().
  const std::filesystem::path& path() const;

  class Impl;

 private:
  explicit Store(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// Walks the hash chain of the database at `db` (opened read-only; never created) in global
/// sequence order, and recomputes every checkpoint's Merkle root where the walk reaches its
/// position. With `pubkey`, every checkpoint must also carry a valid signature by that key
/// (a checkpoint by another key is a break). Returns a base::Error only when the file cannot be
/// read as a sluice audit database; a broken chain or checkpoint is a VerifyResult with
/// ok = false naming the first bad row or checkpoint.
std::expected<VerifyResult, base::Error> verify(const std::filesystem::path& db,
                                                const PublicKey* pubkey = nullptr);

/// What verify establishes besides an intact chain (`sluice audit verify` flags).
struct VerifyOptions {
  /// Every checkpoint must be signed by this key, and at least one must exist: a log without
  /// one is unsigned (an empty log, and a copy taken without its -wal file, look alike).
  const PublicKey* pubkey = nullptr;
  /// Fail when rows after the last signed checkpoint exist (with `pubkey`).
  bool require_signed_tail = false;
  /// A checkpoint kept off the box (`sluice audit checkpoint --json`), which must be signed by
  /// `pubkey`: the log must extend it (its rows 1..position have the kept root). A malformed or
  /// unsigned kept checkpoint is a base::Error naming `consistent_with_name`.
  std::optional<std::string> consistent_with;
  std::string consistent_with_name = "the kept checkpoint";
};
std::expected<VerifyResult, base::Error> verify(const std::filesystem::path& db,
                                                const VerifyOptions& options);

}  // namespace sluice::audit
