// The audit store: producers enqueue events into a bounded queue; one writer thread owns the
// only write connection and commits them in batches, extending the hash chain as it goes.
#include "sluice/audit/store.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <pthread.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <thread>
#include <unordered_set>
#include <variant>
#include <vector>

#include "chain_rows.hpp"
#include "checkpointer.hpp"
#include "merkle.hpp"
#include "row_hash.hpp"
#include "rows.hpp"
#include "schema.hpp"
#include "sluice/audit/signing.hpp"
#include "sluice/base/clock.hpp"
#include "sluice/base/json.hpp"
#include "sluice/base/log.hpp"
#include "sqlite_db.hpp"

namespace sluice::audit {
namespace {

using detail::Db;
using detail::Stmt;
using detail::Value;

spdlog::logger& logger() { return base::logger(base::LoggerId::kAudit); }

/// SQLite reports a failed create as "unable to open database file" with the errno of its
/// last fallback attempt (often ENOENT); find the real cause for the message.
base::Error explainOpenFailure(const std::filesystem::path& path, base::Error error) {
  std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : ".";
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    error.message = path.string() + ": cannot open: directory " + dir.string() + " does not exist";
  } else if (std::filesystem::is_directory(path, ec)) {
    error.message = path.string() + ": cannot open: it is a directory";
  } else if (!std::filesystem::exists(path, ec) && ::access(dir.c_str(), W_OK) != 0) {
    // access() reports EROFS even for root, and EACCES for a directory we cannot write.
    error.message = path.string() + ": cannot create: " + std::strerror(errno);
  }
  return error;
}

/// Where a producer that needs an answer (recordExecution, flush) waits. The writer sets the
/// result and notifies while holding the mutex, so the waiter may destroy it as soon as it
/// wakes: the writer never touches it after unlocking.
struct Waiter {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::optional<base::Error> error;
  std::string hash;

  void finish(std::optional<base::Error> e, std::string h = {}) {
    std::lock_guard lock(mu);
    error = std::move(e);
    hash = std::move(h);
    done = true;
    cv.notify_one();
  }
  void wait() {
    std::unique_lock lock(mu);
    cv.wait(lock, [this] { return done; });
  }
};

// Items stay small (a queue holds thousands; the writer walks them): the rare ones with
// strings of their own (policy texts, checkpoints) are held by pointer.
struct PolicyItem {
  std::unique_ptr<detail::PolicyRecord> record;
};
struct ExecutionItem {
  const ExecutionRecord* record;
  Waiter* waiter;
};
struct FlushItem {
  Waiter* waiter;
};
/// A signed checkpoint from the Checkpointer, to insert in the next transaction.
struct CheckpointItem {
  std::unique_ptr<detail::CheckpointRow> row;
};
/// A producer's event, packed (Store::Impl::pushRow): its table and where its values are in the
/// queue's RowArena.
struct PackedRow {
  std::uint32_t table;  // ChainTable::index
  detail::RowArena::Span values;
};
using Item = std::variant<PolicyItem, PackedRow, CheckpointItem, ExecutionItem, FlushItem>;

constexpr std::uintmax_t kTruncateWalAbove = 4u << 20;
// A writer's open copies the kept WAL into the database only above this many frames
// (readyWal, 256 KiB of 4 KiB pages): one `sluice run` appends about 25 KiB, so every ten runs.
constexpr int kCheckpointWalFrames = 64;
// SQLite checkpoints after a commit that leaves the WAL above this many pages (16 MiB).
constexpr int kAutocheckpointPages = 4096;

bool isSync(const Item& item) {
  return std::holds_alternative<ExecutionItem>(item) || std::holds_alternative<FlushItem>(item);
}

/// What a batch tells the producers waiting on its items (ExecutionItem, FlushItem): the error
/// that refused an item, and an executions row's hash. Sparse, by item index in increasing
/// order: a batch is thousands of rows and only a few have an outcome, so per-item slots were
/// a measurable share of the writer's CPU (constructing and destroying them every batch).
class ItemOutcomes {
 public:
  void refuse(std::size_t index, base::Error e) { errors_.emplace_back(index, std::move(e)); }
  void setHash(std::size_t index, std::string_view hash) { hashes_.emplace_back(index, hash); }
  /// The outcome of item `index`; items must be asked for in increasing order.
  std::optional<base::Error> takeError(std::size_t index) { return take(errors_, e_, index); }
  std::string takeHash(std::size_t index) { return take(hashes_, h_, index).value_or(""); }

 private:
  template <typename T>
  static std::optional<T> take(std::vector<std::pair<std::size_t, T>>& v, std::size_t& next,
                               std::size_t index) {
    while (next < v.size() && v[next].first < index) ++next;
    if (next == v.size() || v[next].first != index) return std::nullopt;
    return std::move(v[next++].second);
  }
  std::vector<std::pair<std::size_t, base::Error>> errors_;
  std::vector<std::pair<std::size_t, std::string>> hashes_;
  std::size_t e_ = 0, h_ = 0;  // the next entry takeError / takeHash looks at
};

}  // namespace

class Store::Impl {
 public:
  std::size_t queueDepth() {
    std::lock_guard lock(mu_);
    return queue_.size();
  }
  Impl(std::filesystem::path path, StoreOptions options)
      : path_(std::move(path)), options_(options) {
    options_.queue_capacity = std::max<std::size_t>(options_.queue_capacity, 1);
    options_.batch_rows = std::max<std::size_t>(options_.batch_rows, 1);
  }
  // The checkpointer's thread pushes into our queue: stop it before any member goes.
  ~Impl() { checkpointer_.reset(); }

  std::expected<void, base::Error> openWriter();
  std::expected<void, base::Error> connectWriter();
  std::expected<void, base::Error> initSchema();
  std::expected<void, base::Error> enableWal();
  void readyWal();
  bool restartWal();
  int writeNoOpFrame();
  std::expected<void, base::Error> prepareStatements();
  std::expected<void, base::Error> prepareInto(Stmt& out, std::string_view sql);
  std::expected<void, base::Error> openReader();
  // Starts the writer thread on a database openWriter() has opened.
  void start() {
    writable_ = true;
    writer_ = std::thread([this] {
      readyWal();
      prepareReceiptInserts();
      writerLoop();
    });
    // Named so that top/perf show where audit time goes.
    pthread_setname_np(writer_.native_handle(), "sluice-audit");
  }
  // Starts the writer thread, which opens the database first (openAsync). Producers may queue
  // events meanwhile; a failed open fails the store, so they are refused from then on.
  void startOpening() {
    writable_ = true;
    opened_ = false;
    writer_ = std::thread([this] {
      const std::optional<int> nice = yieldWhileOpening();
      auto r = openWriter();
      if (!r) fail(r.error());  // before ready() returns: a caller then sees healthy() false
      {
        std::lock_guard lock(mu_);
        opened_ = true;
        if (!r) open_error_ = r.error();
      }
      opened_cv_.notify_all();
      if (r) {
        readyWal();
        prepareReceiptInserts();
      }
      if (nice) ::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), *nice);
      writerLoop();
    });
    pthread_setname_np(writer_.native_handle(), "sluice-audit");
  }
  // An asynchronous open runs while its caller does other work on the same cores (`sluice
  // run` builds its sandbox), and nothing waits for it until later: it runs at nice 19 until
  // its flushes are done, so the caller's threads go first (~0.15 ms of a `sluice run` on 2
  // cores). Only when the thread could take its priority back afterwards (a lower nice needs
  // CAP_SYS_NICE or RLIMIT_NICE; the probe asks the kernel itself): the writer must not stay
  // behind the sandbox's programs. The nice to return to, or none when it was left alone.
  static std::optional<int> yieldWhileOpening() {
    const auto self = static_cast<id_t>(::gettid());
    errno = 0;
    const int nice = ::getpriority(PRIO_PROCESS, self);
    if (errno != 0 || nice <= -20 || nice >= 19) return std::nullopt;
    if (::setpriority(PRIO_PROCESS, self, nice - 1) != 0) return std::nullopt;
    if (::setpriority(PRIO_PROCESS, self, 19) != 0) {
      ::setpriority(PRIO_PROCESS, self, nice);
      return std::nullopt;
    }
    return nice;
  }
  std::expected<void, base::Error> ready() {
    std::unique_lock lock(mu_);
    opened_cv_.wait(lock, [this] { return opened_; });
    if (open_error_) return std::unexpected(*open_error_);
    return {};
  }
  void stop();

  // `row`: a PackedRow's values, copied into the queue's arena.
  bool push(Item&& item, std::span<const Value> row = {});
  // Packs the event's row (rows.hpp, RowArena) and queues it.
  template <typename Event>
  void pushRow(const Event& event);
  bool firstSightOfPolicy(const std::string& sha256) {
    std::lock_guard lock(mu_);
    return policies_seen_.insert(sha256).second;
  }
  // Queues the record; nullopt when queued (the writer then finishes `waiter`), else the error.
  std::optional<base::Error> beginRecordExecution(const ExecutionRecord& record, Waiter& waiter);
  std::expected<void, base::Error> flush();

  bool healthy() const { return writable_ && !failed_.load(std::memory_order_acquire); }
  std::optional<base::Error> failure() const {
    std::lock_guard lock(mu_);
    return failure_;
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  void writerLoop();
  // Signed checkpoints (options_.signing_key): see the definitions.
  std::expected<void, base::Error> loadTree();
  std::expected<detail::MerkleFrontier, base::Error> newestTree();
  std::expected<void, std::string> bindToRows(const detail::MerkleFrontier& tree,
                                              Stmt& checkpoint_at_or_before, const PublicKey& own);
  std::expected<void, base::Error> catchUpTree(std::int64_t head_seq);
  std::expected<void, base::Error> insertCheckpoint(const detail::CheckpointRow& row);
  void finalCheckpoint();
  void processBatch(std::span<Item> batch);
  // One batch, one transaction: writeBatch() and its steps (see the definitions).
  std::expected<void, base::Error> writeBatch(std::span<Item> batch, bool durable,
                                              ItemOutcomes& out);
  std::expected<void, base::Error> beginBatch(bool durable);
  std::expected<void, base::Error> readTip();
  std::expected<void, base::Error> writeItem(const PolicyItem& policy, std::size_t index,
                                             ItemOutcomes& out);
  std::expected<void, base::Error> writeItem(const ExecutionItem& execution, std::size_t index,
                                             ItemOutcomes& out);
  std::expected<void, base::Error> writeItem(const CheckpointItem& checkpoint, std::size_t index,
                                             ItemOutcomes& out);
  std::expected<void, base::Error> writeItem(const FlushItem&, std::size_t, ItemOutcomes&) {
    return {};
  }
  std::expected<void, base::Error> writeItem(const PackedRow& row, std::size_t index,
                                             ItemOutcomes& out) {
    return insertChained(detail::chainTables()[row.table], batch_rows_.values(row.values, values_),
                         index, out);
  }
  template <typename Event>
  std::expected<void, base::Error> insertRow(const detail::RowDescription<Event>& row,
                                             const Event& event, std::size_t index,
                                             ItemOutcomes& out) {
    return insertChained(row.table, detail::rowValues(row, event, scratch_, values_), index, out);
  }
  std::expected<void, base::Error> insertChained(const detail::ChainTable& table,
                                                 std::span<const Value> values, std::size_t index,
                                                 ItemOutcomes& out);
  std::expected<Stmt*, base::Error> insertStatement(const detail::ChainTable& table);
  void prepareReceiptInserts();
  std::expected<void, base::Error> commitBatch();
  void rollback();
  std::expected<void, base::Error> setSynchronous(bool full);
  void fail(base::Error error);
  base::Error stepError(int rc, std::string_view what) {
    return detail::sqliteError(path_, db_.get(), rc, what);
  }

  std::filesystem::path path_;
  StoreOptions options_;
  Db db_;
  bool writable_ = false;  // set before the writer thread starts, never changed after
  bool synchronous_full_ = false;
  // By ChainTable::index (insertSql); each prepared on first use (insertStatement).
  std::array<Stmt, detail::kChainTableCount> insert_;
  Stmt insert_checkpoint_, read_chain_after_;
  Stmt read_head_, write_head_, begin_, commit_, rollback_;
  // Writer thread only: the hasher, the row being written, and the chain's tip (the last row's
  // seq and hash) while a batch's transaction is open.
  detail::RowHasher hasher_;
  detail::RowScratch scratch_;
  std::array<Value, detail::kMaxColumns> values_;
  struct {
    std::int64_t seq = 0;
    detail::HexDigest hash;
  } tip_;
  // With a signing key: the thread keeping the Merkle tree and signing checkpoints; the writer
  // hands it each committed row's hash. tree_size_ counts the rows handed over (or about to be:
  // new_leaves_ holds those of the open transaction). Writer thread only.
  std::unique_ptr<detail::Checkpointer> checkpointer_;
  std::int64_t tree_size_ = 0;
  std::vector<detail::Digest> new_leaves_;

  mutable std::mutex mu_;
  std::condition_variable not_empty_;
  std::condition_variable not_full_;
  std::vector<Item> queue_;      // producers append; the writer swaps it out whole
  detail::RowArena rows_;        // the values of queue_'s PackedRows; swapped out with it
  detail::RowArena batch_rows_;  // writer thread only: those of the batch being written
  std::size_t sync_in_queue_ = 0;
  std::size_t wake_threshold_ = 1;
  bool writer_waiting_ = false;
  bool stopping_ = false;
  std::atomic<bool> failed_{false};
  std::optional<base::Error> failure_;     // guarded by mu_
  bool opened_ = true;                     // guarded by mu_; false while openAsync runs
  std::optional<base::Error> open_error_;  // guarded by mu_
  std::condition_variable opened_cv_;
  std::unordered_set<std::string> policies_seen_;  // guarded by mu_
  std::thread writer_;
};

std::expected<void, base::Error> Store::Impl::openReader() {
  auto db =
      detail::openDb(path_, SQLITE_OPEN_READONLY, static_cast<int>(options_.busy_timeout.count()));
  if (!db) return std::unexpected(db.error());
  db_ = std::move(*db);
  return detail::checkReadable(path_, db_.get());
}

namespace {

/// Creates the database file with the store's mode (and group) before SQLite opens it: SQLite
/// would create it 0644 less the umask, readable by every user, and give its -wal and -shm
/// files the same mode. An existing file is left as it is, with a warning if others can read
/// it.
std::expected<void, base::Error> createPrivately(const std::filesystem::path& path,
                                                 const StoreOptions& o) {
  const mode_t mode = o.group >= 0 ? 0640 : static_cast<mode_t>(o.file_mode & 0777);
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
  if (fd < 0) {
    if (errno != EEXIST) return {};  // SQLite's own open reports the real problem
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && (st.st_mode & 0007) != 0) {
      logger().warn(
          "{}: the audit database is readable by other users (mode {:04o}); it holds argv, "
          "URLs and hosts: chmod 600 it (and its -wal and -shm files)",
          path.string(), st.st_mode & 07777);
    }
    return {};
  }
  // The umask may have taken bits off; set exactly the mode asked for.
  int rc = ::fchmod(fd, mode);
  if (rc == 0 && o.group >= 0)
    rc = ::fchown(fd, static_cast<uid_t>(-1), static_cast<gid_t>(o.group));
  int err = errno;
  ::close(fd);
  if (rc != 0) {
    ::unlink(path.c_str());
    return std::unexpected(base::Error{
        base::Code::kIo, fmt::format("{}: cannot set the audit database's mode or group: {}",
                                     path.string(), std::strerror(err))});
  }
  return {};
}

}  // namespace

// Opens the write connection and readies it: schema checked (created, migrated), WAL, the
// statements of the writer loop, and with a signing key the Merkle tree.
std::expected<void, base::Error> Store::Impl::openWriter() {
  // SQLite's allocation statistics take a global mutex around every malloc; at 200k rows/s
  // that is measurable and we never read them. Only possible before SQLite initialises; a
  // later call is refused harmlessly (SQLITE_MISUSE).
  static std::once_flag once;
  std::call_once(once, [] { sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0); });
  if (auto r = createPrivately(path_, options_); !r) return r;
  if (auto r = connectWriter(); !r) return r;
  // Check (and create or migrate) the schema before touching the journal mode: a foreign
  // database must not be rewritten, not even its header.
  if (auto r = initSchema(); !r) return r;
  if (auto r = enableWal(); !r) return r;
  if (auto r = setSynchronous(false); !r) return r;
  // A bigger page cache keeps the index pages of recent rows in memory (inserts otherwise
  // re-read them), and a larger autocheckpoint interval means fewer checkpoint fsyncs at
  // 200k rows/s. Readers are unaffected: WAL lets them read while the WAL grows.
  if (auto r = detail::exec(path_, db_.get(),
                            fmt::format("PRAGMA cache_size=-{}; PRAGMA wal_autocheckpoint={}",
                                        std::max(64u, options_.cache_kib), kAutocheckpointPages));
      !r) {
    return r;
  }
  if (auto r = prepareStatements(); !r) return r;
  if (options_.signing_key) {
    if (auto r = loadTree(); !r) return r;
  }
  logger().debug("audit store {}: schema version {}, WAL", path_.string(), kSchemaVersion);
  return {};
}

// The write connection, refused when SQLite could only open the file read-only.
std::expected<void, base::Error> Store::Impl::connectWriter() {
  // NOMUTEX: the connection is used by this thread until start(), then only by the writer.
  auto db = detail::openDb(path_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                           static_cast<int>(options_.busy_timeout.count()));
  if (!db) return std::unexpected(explainOpenFailure(path_, db.error()));
  db_ = std::move(*db);
  sqlite3* raw = db_.get();
  // Keep the WAL file when the last connection closes (its content is checkpointed and
  // invalid by then). Deleting it costs ~2 ms on ext4 (freeing its blocks), and the next
  // open would re-create it and fsync the directory: a third of a short `sluice run`.
  int persist_wal = 1;
  sqlite3_file_control(raw, "main", SQLITE_FCNTL_PERSIST_WAL, &persist_wal);
  if (!options_.checkpoint_on_close)
    sqlite3_db_config(raw, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr);
  // SQLite silently falls back to read-only when the file exists but cannot be opened for
  // writing (read-only file system, no write permission); a writer must refuse that now.
  if (sqlite3_db_readonly(raw, "main") == 1) {
    return std::unexpected(detail::sqliteCoded(base::Code::kIo,
                                               path_.string() +
                                                   ": cannot open for writing: the file or its "
                                                   "file system is read-only",
                                               SQLITE_READONLY));
  }
  return {};
}

// Creates, checks or migrates the schema in a transaction of its own.
std::expected<void, base::Error> Store::Impl::initSchema() {
  sqlite3* raw = db_.get();
  if (auto r = detail::exec(path_, raw, "BEGIN IMMEDIATE"); !r) return r;
  auto r = detail::initOrMigrate(path_, raw);
  if (r) r = detail::exec(path_, raw, "COMMIT");
  if (!r) detail::exec(path_, raw, "ROLLBACK");
  return r;
}

std::expected<void, base::Error> Store::Impl::enableWal() {
  sqlite3* raw = db_.get();
  {
    auto stmt = detail::prepare(path_, raw, "PRAGMA journal_mode=WAL");
    if (!stmt) return std::unexpected(stmt.error());
    int rc = stmt->step();
    if (rc != SQLITE_ROW) return std::unexpected(stepError(rc, "cannot enable WAL"));
    if (stmt->columnText(0) != "wal") {
      return std::unexpected(
          base::Error{base::Code::kIo, path_.string() + ": cannot enable WAL (journal mode is " +
                                           std::string(stmt->columnText(0)) + ")"});
    }
  }
  return {};
}

// Run by the writer thread once the open is reported, before its first batch, so that what it
// syncs overlaps what the caller does next (`sluice run`: the sandbox's program) instead of
// delaying it; the commit a caller waits for then pays one flush of the WAL and nothing else.
// With a persistent WAL (connectWriter) the previous sessions' frames stay valid on disk and
// writes append after them. A one-page write that changes nothing (writeNoOpFrame) tells how
// many frames the WAL holds, and:
// - if it started a new WAL (none was left), it wrote and synced the header, which the first
//   batch would otherwise do on the waited-for commit;
// - above kCheckpointWalFrames, the frames are copied into the database and the WAL restarted
//   (restartWal), so it stays small and the next open's recovery reads little;
// - otherwise the WAL is synced once (its new frame needs no sync): SQLite syncs the WAL's
//   directory on the first sync of each connection's WAL, which would land on that commit too.
// Appending rather than copying at every open saves a `sluice run` the copy's three flushes
// (WAL, directory, database file) and the restart's one.
void Store::Impl::readyWal() {
  const int frames = writeNoOpFrame();
  if (frames < 0 || frames == 1) return;
  if (frames > kCheckpointWalFrames && restartWal()) return;
  sqlite3_file* wal = nullptr;
  if (sqlite3_file_control(db_.get(), "main", SQLITE_FCNTL_JOURNAL_POINTER, &wal) == SQLITE_OK &&
      wal && wal->pMethods)
    wal->pMethods->xSync(wal, SQLITE_SYNC_NORMAL);
}

// Copies the WAL's frames into the database (their fsyncs: WAL, database file) and restarts
// the WAL with a frame that changes nothing (its header synced). PASSIVE never waits; false
// when another connection still reads frames (they are copied and the WAL restarted later).
bool Store::Impl::restartWal() {
  int log_frames = -1, copied = -1;
  const int rc =
      sqlite3_wal_checkpoint_v2(db_.get(), "main", SQLITE_CHECKPOINT_PASSIVE, &log_frames, &copied);
  if (rc != SQLITE_OK || copied != log_frames) return false;
  return writeNoOpFrame() == 1;
}

// One transaction whose page goes to the WAL unchanged; the frames in the WAL after it (-1:
// it failed). A write at the start of the WAL writes the WAL's header and syncs it before its
// frames (SQLite does, so a frame of a new generation can never sit behind a stale header).
int Store::Impl::writeNoOpFrame() {
  int frames = -1;
  // The WAL hook reports the frame count; setting it replaces the autocheckpoint's, which is
  // set again after.
  sqlite3_wal_hook(
      db_.get(),
      [](void* out, sqlite3*, const char*, int n) {
        *static_cast<int*>(out) = n;
        return SQLITE_OK;
      },
      &frames);
  // Two updates that cancel out: a row rewritten with its own value leaves its page clean
  // (SQLite compares the bytes) and nothing would be written.
  auto r = detail::exec(path_, db_.get(),
                        "BEGIN IMMEDIATE; UPDATE chain_head SET seq = seq + 1 WHERE id = 0; "
                        "UPDATE chain_head SET seq = seq - 1 WHERE id = 0; COMMIT");
  sqlite3_wal_autocheckpoint(db_.get(), kAutocheckpointPages);
  if (r) return frames;
  // Only an optimisation: the first batch writes the header instead.
  (void)detail::exec(path_, db_.get(), "ROLLBACK");
  logger().debug("audit store {}: no frame written at open: {}", path_.string(), r.error().message);
  return -1;
}

std::expected<void, base::Error> Store::Impl::prepareInto(Stmt& out, std::string_view sql) {
  auto s = detail::prepare(path_, db_.get(), sql);
  if (!s) return std::unexpected(s.error());
  out = std::move(*s);
  return {};
}

// The statements of every transaction: the head's and the transaction's. The tables' INSERTs
// are left out of the open (~100 us of CPU, which `sluice run` spent while its sandbox was
// being built and before its start gate): those a receipt's commit uses are prepared after the
// open's flushes (prepareReceiptInserts), the others when the writer first writes to their
// table (insertStatement).
std::expected<void, base::Error> Store::Impl::prepareStatements() {
  for (auto r : {prepareInto(read_head_, "SELECT seq, hash FROM chain_head WHERE id = 0"),
                 prepareInto(write_head_, "UPDATE chain_head SET seq = ?1, hash = ?2 WHERE id = 0"),
                 prepareInto(begin_, "BEGIN IMMEDIATE"), prepareInto(commit_, "COMMIT"),
                 prepareInto(rollback_, "ROLLBACK")}) {
    if (!r) return r;
  }
  return {};
}

// With a signing key: prepares the checkpoint statements and starts the Checkpointer on the
// tree of the newest checkpoint (newestTree) or, without one, on an empty tree that
// catchUpTree() fills with every row.
std::expected<void, base::Error> Store::Impl::loadTree() {
  if (auto r =
          prepareInto(insert_checkpoint_,
                      // Checkpoints are numbered in position order (verify checks it): one at or
                      // before the newest one's position (another signing writer got there first)
                      // adds nothing that one does not cover, and is left out.
                      "INSERT INTO checkpoints (position, root, signature, key_id, ts, frontier) "
                      "SELECT ?1, ?2, ?3, ?4, ?5, ?6 WHERE ?1 > "
                      "(SELECT coalesce(max(position), 0) FROM checkpoints)");
      !r) {
    return r;
  }
  // Every chained row's (seq, hash) in (?1, ?2].
  if (auto r = prepareInto(read_chain_after_, detail::chainHashesSql("seq > ?1 AND seq <= ?2")); !r)
    return r;
  auto tree = newestTree();
  if (!tree) return std::unexpected(tree.error());
  tree_size_ = static_cast<std::int64_t>(tree->size());
  const std::int64_t last_position = tree_size_;
  checkpointer_ = std::make_unique<detail::Checkpointer>(
      options_.signing_key, options_.checkpoint_rows, options_.checkpoint_interval,
      std::move(*tree), last_position, [this](detail::CheckpointRow row) {
        push(CheckpointItem{std::make_unique<detail::CheckpointRow>(std::move(row))});
      });
  return {};
}

namespace {

/// The current row of a `SELECT seq, position, root, signature, key_id, ts, frontier`.
detail::StoredCheckpoint storedCheckpoint(const Stmt& st) {
  return {st.columnInt(0),
          st.columnInt(1),
          st.columnInt(5),
          std::string(st.columnText(2)),
          std::string(st.columnText(3)),
          std::string(st.columnText(4)),
          std::string(st.columnText(6))};
}

}  // namespace

// The tree of the newest checkpoint, verified: a store never extends a tree it has not
// verified, or a checkpoint planted by someone who can write the file but holds no key would
// get its tree (and a row of their choosing in it) signed. It must be signed by this store's
// own key with a frontier folding to the signed root (resumableTree), and end with this
// database's rows (bindToRows). That is enough, and cheap (one Ed25519 verification, a few
// rows): only a holder of the key signs, and a store signs only trees it verified this way or
// built from the rows. `audit verify` recomputes the whole tree.
std::expected<detail::MerkleFrontier, base::Error> Store::Impl::newestTree() {
  // The newest checkpoint at or before position ?1 (bindToRows looks for the one before).
  auto st = detail::prepare(path_, db_.get(),
                            "SELECT seq, position, root, signature, key_id, ts, frontier "
                            "FROM checkpoints WHERE position <= ?1 "
                            "ORDER BY position DESC, seq DESC LIMIT 1");
  if (!st) return std::unexpected(st.error());
  st->bindInt(1, std::numeric_limits<std::int64_t>::max());
  const int rc = st->step();
  if (rc == SQLITE_DONE) return detail::MerkleFrontier{};
  if (rc != SQLITE_ROW) return std::unexpected(stepError(rc, "cannot read the latest checkpoint"));
  const detail::StoredCheckpoint c = storedCheckpoint(*st);
  auto own = PublicKey::fromPem(options_.signing_key->publicKeyPem(), "the signing key");
  if (!own) return std::unexpected(own.error());
  auto tree = detail::resumableTree(c, **own);
  if (tree) {
    auto bound = bindToRows(*tree, *st, **own);
    if (!bound) tree = std::unexpected(bound.error());
  }
  if (!tree) {
    return std::unexpected(base::Error{
        base::Code::kIntegrity,
        fmt::format(
            "{}: checkpoint seq {} (position {}) {}; refusing to write and sign over a tree that "
            "cannot be verified: investigate with sluice audit verify --db {} --pubkey <the log's "
            "public key>",
            path_.string(), c.seq, c.position, tree.error(), path_.string())});
  }
  return std::move(*tree);
}

// Binds a signed tree to this database's rows: its last leaves must be the chain hashes of the
// rows ending at row `size`, whose chain hash commits to every row before it. Checked at the
// cost of the fewer rows of two ways: the tree's smallest subtree (the lowest set bit of its
// size: one row for an odd size, a handful for most) recomputed from the rows it covers, or the
// previous checkpoint this key signed extended by the rows after it (a checkpoint at a multiple
// of a large power of two, such as every 65,536 rows, is at most that many rows from the one
// before). A checkpoint copied from another log signed by the same key fails this, and so does
// one whose last rows were deleted or re-hashed.
std::expected<void, std::string> Store::Impl::bindToRows(const detail::MerkleFrontier& tree,
                                                         Stmt& checkpoint_at_or_before,
                                                         const PublicKey& own) {
  const std::uint64_t size = tree.size();
  std::uint64_t first = size - (size & (~size + 1));  // the smallest subtree: rows (first, size]
  detail::MerkleFrontier base;
  Stmt& st = checkpoint_at_or_before;
  st.reset();
  st.bindInt(1, static_cast<std::int64_t>(size) - 1);
  if (st.step() == SQLITE_ROW) {
    const detail::StoredCheckpoint prev = storedCheckpoint(st);
    if (static_cast<std::uint64_t>(prev.position) > first) {
      if (auto t = detail::resumableTree(prev, own)) {
        base = std::move(*t);
        first = base.size();
      }
    }
  }
  st.reset();
  const bool whole = base.size() > 0;  // base + rows is the whole tree, else its last subtree
  read_chain_after_.bindInt(1, static_cast<std::int64_t>(first));
  read_chain_after_.bindInt(2, static_cast<std::int64_t>(size));
  std::uint64_t next = first + 1;  // the seq the next row must have
  int rc;
  while ((rc = read_chain_after_.step()) == SQLITE_ROW) {
    auto digest = detail::fromHex(read_chain_after_.columnText(1));
    if (!digest || read_chain_after_.columnInt(0) != static_cast<std::int64_t>(next)) {
      rc = SQLITE_DONE;  // a gap or a malformed hash: the rows do not make the tree
      break;
    }
    base.append(*digest);
    ++next;
  }
  read_chain_after_.reset();
  if (rc != SQLITE_DONE) return std::unexpected(stepError(rc, "cannot read the chain").message);
  const detail::Digest want = whole ? tree.root() : tree.nodes().back();
  if (next != size + 1 || base.root() != want) {
    return std::unexpected(fmt::format(
        "does not match this database's rows {}..{} (a checkpoint from another log, or rows "
        "deleted or changed since it was signed)",
        first + 1, size));
  }
  return {};
}

// Extends the tree to the chain head (rows another writer, or an earlier session, added).
std::expected<void, base::Error> Store::Impl::catchUpTree(std::int64_t head_seq) {
  const std::int64_t size = tree_size_;
  if (size == head_seq) return {};
  if (size > head_seq) {
    return std::unexpected(base::Error{
        base::Code::kIntegrity,
        fmt::format(
            "{}: the chain ends at seq {} but a checkpoint already covers seq {} (rows deleted); "
            "refusing to sign: run sluice audit verify --pubkey",
            path_.string(), head_seq, size)});
  }
  read_chain_after_.bindInt(1, size);
  read_chain_after_.bindInt(2, head_seq);
  int rc;
  while ((rc = read_chain_after_.step()) == SQLITE_ROW) {
    std::int64_t seq = read_chain_after_.columnInt(0);
    auto digest = detail::fromHex(read_chain_after_.columnText(1));
    if (seq != tree_size_ + 1 || !digest) {
      read_chain_after_.reset();
      return std::unexpected(base::Error{
          base::Code::kIntegrity,
          fmt::format(
              "{}: the chain is broken at seq {} (a gap or a malformed hash); refusing to sign it: "
              "run sluice audit verify",
              path_.string(), tree_size_ + 1)});
    }
    new_leaves_.push_back(*digest);
    ++tree_size_;
  }
  read_chain_after_.reset();
  if (rc != SQLITE_DONE) return std::unexpected(stepError(rc, "cannot read the chain"));
  if (tree_size_ != head_seq) {
    return std::unexpected(base::Error{
        base::Code::kIntegrity,
        fmt::format("{}: chain_head says seq {} but the rows end at seq {}; refusing to sign",
                    path_.string(), head_seq, tree_size_)});
  }
  return {};
}

// Inside an open transaction: one checkpoints row (signed by the Checkpointer).
std::expected<void, base::Error> Store::Impl::insertCheckpoint(const detail::CheckpointRow& row) {
  insert_checkpoint_.bindInt(1, row.position);
  insert_checkpoint_.bindText(2, row.root);
  insert_checkpoint_.bindText(3, row.signature);
  insert_checkpoint_.bindText(4, row.key_id);
  insert_checkpoint_.bindInt(5, row.ts);
  insert_checkpoint_.bindText(6, row.frontier);
  int rc = insert_checkpoint_.step();
  insert_checkpoint_.reset();
  if (rc != SQLITE_DONE) return std::unexpected(stepError(rc, "cannot insert a checkpoint"));
  return {};
}

// At close, in a transaction of its own: the rows up to the chain head (other writers' too)
// go to the Checkpointer, which stops and returns what it has not emitted yet, the last
// checkpoint covering every row.
void Store::Impl::finalCheckpoint() {
  if (!checkpointer_) return;
  if (failed_.load(std::memory_order_acquire)) {
    (void)checkpointer_->finish();
    return;
  }
  // Not durable (no fsync): a checkpoint lost in a crash leaves its rows unsigned until the
  // next writer signs them, and `sluice run` should not wait for a disk flush on its way out.
  if (synchronous_full_) (void)setSynchronous(false);
  int rc = begin_.step();
  begin_.reset();
  if (rc != SQLITE_DONE) {
    (void)checkpointer_->finish();
    fail(stepError(rc, "cannot begin a transaction"));
    return;
  }
  std::expected<void, base::Error> r;
  new_leaves_.clear();
  rc = read_head_.step();
  if (rc != SQLITE_ROW) {
    r = std::unexpected(
        rc == SQLITE_DONE
            ? base::Error{base::Code::kIntegrity, path_.string() + ": chain_head row is missing"}
            : stepError(rc, "cannot read the chain head"));
  } else {
    std::int64_t head = read_head_.columnInt(0);
    read_head_.reset();
    r = catchUpTree(head);
  }
  read_head_.reset();
  if (r) checkpointer_->add(new_leaves_);
  std::vector<detail::CheckpointRow> rows = checkpointer_->finish();
  {
    // Checkpoints the thread queued after our loop's last batch: insert them too.
    std::lock_guard lock(mu_);
    for (auto& item : queue_) {
      if (auto* k = std::get_if<CheckpointItem>(&item)) rows.push_back(std::move(*k->row));
    }
    std::erase_if(queue_, [](const Item& i) { return std::holds_alternative<CheckpointItem>(i); });
  }
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.position < b.position; });
  for (const auto& row : rows) {
    if (r) r = insertCheckpoint(row);
  }
  if (r) {
    rc = commit_.step();
    commit_.reset();
    if (rc != SQLITE_DONE) r = std::unexpected(stepError(rc, "cannot commit a checkpoint"));
  }
  if (!r) {
    rollback();
    fail(r.error());
  }
}

std::expected<void, base::Error> Store::Impl::setSynchronous(bool full) {
  // WAL + NORMAL: a commit is atomic but not synced; the WAL is synced at checkpoints. FULL
  // also syncs the WAL at commit, which makes everything before it in the WAL durable too.
  auto r = detail::exec(path_, db_.get(),
                        full ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL");
  if (r) synchronous_full_ = full;
  return r;
}

template <typename Event>
void Store::Impl::pushRow(const Event& event) {
  // Computed here, on the producer's thread, into buffers of its own (a list's JSON text); the
  // arena copies them under the queue's lock.
  thread_local detail::RowScratch scratch;
  thread_local std::array<Value, detail::kMaxColumns> values;
  const auto& row = detail::rowOf<Event>();
  push(PackedRow{static_cast<std::uint32_t>(row.table.index), {}},
       detail::rowValues(row, event, scratch, values));
}

void Store::Impl::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  not_empty_.notify_all();
  if (writer_.joinable()) writer_.join();
  // The WAL file is kept (openWriter), and its last frames stay readable until the next writer
  // restarts it: the next open reads them all. After a big session (a long-running proxy) that
  // could be megabytes, so a WAL above kTruncateWalAbove is emptied now, once; short sessions
  // (`sluice run`: tens of KiB) keep it, since truncating costs milliseconds on ext4.
  if (writable_ && !failed_.load() && db_.get()) {
    std::error_code ec;
    const auto wal_size = std::filesystem::file_size(path_.string() + "-wal", ec);
    if (!ec && wal_size > kTruncateWalAbove)
      sqlite3_wal_checkpoint_v2(db_.get(), "main", SQLITE_CHECKPOINT_TRUNCATE, nullptr, nullptr);
  }
}

bool Store::Impl::push(Item&& item, std::span<const Value> row) {
  if (!writable_) return false;
  bool sync = isSync(item);
  bool notify = false;
  {
    std::unique_lock lock(mu_);
    // Backpressure: a full queue blocks the producer; it never drops.
    not_full_.wait(lock, [this] {
      return queue_.size() < options_.queue_capacity || failed_.load(std::memory_order_relaxed);
    });
    if (failed_.load(std::memory_order_relaxed)) return false;
    if (auto* packed = std::get_if<PackedRow>(&item)) packed->values = rows_.append(row);
    queue_.push_back(std::move(item));
    if (sync) ++sync_in_queue_;
    notify = writer_waiting_ && (sync || queue_.size() >= wake_threshold_);
  }
  if (notify) not_empty_.notify_one();
  return true;
}

std::optional<base::Error> Store::Impl::beginRecordExecution(const ExecutionRecord& record,
                                                             Waiter& waiter) {
  if (!writable_)
    return base::Error{base::Code::kConflict, path_.string() + ": store is open read-only"};
  if (record.id.empty())
    return base::Error{base::Code::kInvalidArgument,
                       path_.string() + ": execution record has an empty id"};
  if (!push(ExecutionItem{&record, &waiter}))
    return failure().value_or(
        base::Error{base::Code::kUnavailable, path_.string() + ": store failed"});
  return std::nullopt;
}

std::expected<void, base::Error> Store::Impl::flush() {
  if (!writable_)
    return std::unexpected(
        base::Error{base::Code::kConflict, path_.string() + ": store is open read-only"});
  Waiter waiter;
  if (!push(FlushItem{&waiter})) {
    return std::unexpected(failure().value_or(
        base::Error{base::Code::kUnavailable, path_.string() + ": store failed"}));
  }
  waiter.wait();
  if (waiter.error) return std::unexpected(*waiter.error);
  return {};
}

void Store::Impl::fail(base::Error error) {
  logger().error("audit store failed, refusing further events: {}", error.message);
  {
    std::lock_guard lock(mu_);
    if (!failure_) failure_ = std::move(error);
    failed_.store(true, std::memory_order_release);
  }
  // Wake producers blocked on a full queue: they must learn of the failure, not wait forever.
  not_full_.notify_all();
}

void Store::Impl::writerLoop() {
  std::vector<Item> batch;
  for (;;) {
    {
      std::unique_lock lock(mu_);
      writer_waiting_ = true;
      wake_threshold_ = 1;
      not_empty_.wait(lock, [this] { return !queue_.empty() || stopping_; });
      if (queue_.empty() && stopping_) break;
      // Let a batch fill: until batch_rows are queued, or batch_interval has passed, or a
      // producer waits for a commit (execution receipt, flush), whichever comes first.
      auto deadline = std::chrono::steady_clock::now() + options_.batch_interval;
      wake_threshold_ = options_.batch_rows;
      not_empty_.wait_until(lock, deadline, [this] {
        return queue_.size() >= wake_threshold_ || sync_in_queue_ > 0 || stopping_ ||
               failed_.load(std::memory_order_relaxed);
      });
      writer_waiting_ = false;
      // Take everything at once (O(1) swap; both vectors keep their capacity, so the steady
      // state allocates nothing per event).
      batch.swap(queue_);
      batch_rows_.swap(rows_);
      sync_in_queue_ = 0;
    }
    not_full_.notify_all();
    for (std::size_t first = 0; first < batch.size(); first += options_.batch_rows) {
      std::size_t n = std::min(options_.batch_rows, batch.size() - first);
      processBatch(std::span<Item>(batch.data() + first, n));
    }
    batch.clear();
    batch_rows_.clear();
  }
  // At close: the last rows get their checkpoint before the connection goes.
  finalCheckpoint();
}

void Store::Impl::processBatch(std::span<Item> batch) {
  ItemOutcomes out;
  std::optional<base::Error> batch_error;
  // One pass over the items before the transaction: does it hold a receipt (synchronous=FULL),
  // and is anyone waiting for an answer.
  bool durable = false, waited_for = false;
  for (const Item& item : batch) {
    durable = durable || std::holds_alternative<ExecutionItem>(item);
    waited_for = waited_for || isSync(item);
  }
  if (failed_.load(std::memory_order_acquire)) {
    batch_error = failure().value_or(
        base::Error{base::Code::kUnavailable, path_.string() + ": store failed"});
  } else {
    auto r = writeBatch(batch, durable, out);
    if (!r) {
      fail(r.error());
      batch_error = r.error();
    }
  }
  for (std::size_t i = 0; waited_for && i < batch.size(); ++i) {
    if (!isSync(batch[i])) continue;
    std::optional<base::Error> err = batch_error ? batch_error : out.takeError(i);
    if (auto* e = std::get_if<ExecutionItem>(&batch[i])) {
      e->waiter->finish(std::move(err), out.takeHash(i));
    } else if (auto* f = std::get_if<FlushItem>(&batch[i])) {
      f->waiter->finish(std::move(err));
    }
  }
}

// One transaction: each item's row appended to the chain, then the new head. An item refused
// on its own (a duplicate execution id) is reported in `out`; any other error rolls it all back.
std::expected<void, base::Error> Store::Impl::writeBatch(std::span<Item> batch, bool durable,
                                                         ItemOutcomes& out) {
  if (auto r = beginBatch(durable); !r) return r;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    auto r = std::visit([&](const auto& item) { return writeItem(item, i, out); }, batch[i]);
    if (!r) {
      rollback();
      return r;
    }
  }
  return commitBatch();
}

// Opens the batch's transaction (synchronous=FULL when it holds a receipt) and reads the tip.
std::expected<void, base::Error> Store::Impl::beginBatch(bool durable) {
  if (durable != synchronous_full_) {
    if (auto r = setSynchronous(durable); !r) return r;
  }
  const int rc = begin_.step();
  begin_.reset();
  if (rc != SQLITE_DONE) return std::unexpected(stepError(rc, "cannot begin a transaction"));
  auto r = readTip();
  if (r && checkpointer_) {
    new_leaves_.clear();
    r = catchUpTree(tip_.seq);
  }
  if (!r) rollback();
  return r;
}

// The head is re-read in every transaction: another process with its own writer (two
// `sluice run` sharing a database) may have extended the chain since our last commit.
std::expected<void, base::Error> Store::Impl::readTip() {
  const int rc = read_head_.step();
  std::expected<void, base::Error> r;
  if (rc != SQLITE_ROW) {
    r = std::unexpected(
        rc == SQLITE_DONE
            ? base::Error{base::Code::kIntegrity, path_.string() + ": chain_head row is missing"}
            : stepError(rc, "cannot read the chain head"));
  } else {
    tip_.seq = read_head_.columnInt(0);
    if (!tip_.hash.assign(read_head_.columnText(1)))
      r = std::unexpected(base::Error{base::Code::kIntegrity,
                                      path_.string() + ": chain_head holds a malformed hash"});
  }
  read_head_.reset();
  return r;
}

std::expected<void, base::Error> Store::Impl::writeItem(const PolicyItem& item, std::size_t index,
                                                        ItemOutcomes& out) {
  const detail::PolicyRecord& policy = *item.record;
  // policies is content-addressed and verify checks it: a key that is not the text's hash
  // would make the whole database fail verification, so refuse it here.
  if (hasher_.sha256(policy.yaml) != policy.sha256) {
    logger().error(
        "{}: not recording policy of workflow '{}': {} is not the SHA-256 of "
        "its text",
        path_.string(), policy.workflow, policy.sha256);
    return {};
  }
  return insertRow(detail::rowOf<detail::PolicyRecord>(), policy, index, out);
}

std::expected<void, base::Error> Store::Impl::writeItem(const ExecutionItem& execution,
                                                        std::size_t index, ItemOutcomes& out) {
  const std::int64_t before = tip_.seq;
  auto r = insertRow(detail::rowOf<ExecutionRecord>(), *execution.record, index, out);
  if (r && tip_.seq != before) out.setHash(index, tip_.hash.view());  // the receipt's audit hash
  return r;
}

std::expected<void, base::Error> Store::Impl::writeItem(const CheckpointItem& checkpoint,
                                                        std::size_t, ItemOutcomes&) {
  return insertCheckpoint(*checkpoint.row);
}

// Appends one row to the chain (the tip moves on). On a constraint violation (duplicate
// execution id) the row is skipped and reported to its producer; any other error fails the
// batch.
std::expected<void, base::Error> Store::Impl::insertChained(const detail::ChainTable& table,
                                                            std::span<const Value> values,
                                                            std::size_t index, ItemOutcomes& out) {
  detail::HexDigest hash;
  detail::Digest raw_hash;
  hasher_.hash(table.name, tip_.seq + 1, tip_.hash.view(), detail::hashedValues(table, values),
               hash, raw_hash.data());
  auto prepared = insertStatement(table);
  if (!prepared) return std::unexpected(prepared.error());
  Stmt& stmt = **prepared;
  detail::bindRow(stmt, tip_.seq + 1, tip_.hash.view(), hash.view(), values);
  const int rc = stmt.step();
  if (rc != SQLITE_DONE) {
    base::Error e = stepError(rc, fmt::format("cannot insert into {}", table.name));
    stmt.reset();
    if ((rc & 0xff) != SQLITE_CONSTRAINT) return std::unexpected(std::move(e));
    out.refuse(index, std::move(e));
    return {};
  }
  stmt.reset();
  // INSERT OR IGNORE of a policy text the store already holds (another process stored it):
  // nothing was written, so the row takes no seq.
  if (sqlite3_changes(db_.get()) == 0) return {};
  ++tip_.seq;
  tip_.hash = hash;
  if (checkpointer_) {
    new_leaves_.push_back(raw_hash);
    ++tree_size_;
  }
  return {};
}

// The table's INSERT (rows.hpp, insertSql), prepared on first use and kept.
std::expected<Stmt*, base::Error> Store::Impl::insertStatement(const detail::ChainTable& table) {
  Stmt& stmt = insert_[table.index];
  if (!stmt) {
    if (auto r = prepareInto(stmt, detail::insertSql(table)); !r) return std::unexpected(r.error());
  }
  return &stmt;
}

// After readyWal, before the first batch: the INSERTs a durable receipt's commit uses (its
// executions row, and the policy its caller records first), so that the commit a caller waits
// for does not prepare them (~40 us). A failure is reported by the batch that needs them.
void Store::Impl::prepareReceiptInserts() {
  (void)insertStatement(detail::rowOf<detail::PolicyRecord>().table);
  (void)insertStatement(detail::rowOf<ExecutionRecord>().table);
}

// The new head, the commit, and then (never for a row that might still roll back) the rows'
// hashes to the Merkle tree.
std::expected<void, base::Error> Store::Impl::commitBatch() {
  write_head_.bindInt(1, tip_.seq);
  write_head_.bindText(2, tip_.hash.view());
  int rc = write_head_.step();
  write_head_.reset();
  if (rc != SQLITE_DONE) {
    base::Error e = stepError(rc, "cannot update the chain head");
    rollback();
    return std::unexpected(e);
  }
  rc = commit_.step();
  commit_.reset();
  if (rc != SQLITE_DONE) {
    base::Error e = stepError(rc, "cannot commit");
    rollback();
    return std::unexpected(e);
  }
  if (checkpointer_) checkpointer_->add(new_leaves_);
  return {};
}

void Store::Impl::rollback() {
  // A failed COMMIT (SQLITE_FULL, SQLITE_IOERR) may already have rolled back.
  if (!sqlite3_get_autocommit(db_.get())) {
    rollback_.step();
    rollback_.reset();
  }
}

Store::Store(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Store::~Store() { impl_->stop(); }

std::expected<std::unique_ptr<Store>, base::Error> Store::open(const std::filesystem::path& db,
                                                               StoreOptions options) {
  auto impl = std::make_unique<Impl>(db, options);
  auto r = options.read_only ? impl->openReader() : impl->openWriter();
  if (!r) return std::unexpected(r.error());
  if (!options.read_only) impl->start();
  return std::unique_ptr<Store>(new Store(std::move(impl)));
}

std::unique_ptr<Store> Store::openAsync(const std::filesystem::path& db, StoreOptions options) {
  options.read_only = false;
  auto impl = std::make_unique<Impl>(db, options);
  impl->startOpening();
  return std::unique_ptr<Store>(new Store(std::move(impl)));
}

std::expected<void, base::Error> Store::ready() { return impl_->ready(); }

struct PendingExecution::State {
  Waiter waiter;
  std::optional<base::Error> refused;  // not queued at all
  bool waited = false;
};

PendingExecution::PendingExecution(std::unique_ptr<State> state) : state_(std::move(state)) {}
PendingExecution::PendingExecution(PendingExecution&&) noexcept = default;
PendingExecution& PendingExecution::operator=(PendingExecution&& other) noexcept {
  if (this != &other) {
    if (state_) (void)wait();  // the writer may still point into our state
    state_ = std::move(other.state_);
  }
  return *this;
}
PendingExecution::~PendingExecution() {
  if (state_) (void)wait();
}

std::expected<std::string, base::Error> PendingExecution::wait() {
  State& s = *state_;
  if (s.refused) return std::unexpected(*s.refused);
  if (!s.waited) {
    s.waiter.wait();
    s.waited = true;
  }
  if (s.waiter.error) return std::unexpected(*s.waiter.error);
  return s.waiter.hash;
}

PendingExecution Store::beginRecordExecution(const ExecutionRecord& record) {
  auto state = std::make_unique<PendingExecution::State>();
  state->refused = impl_->beginRecordExecution(record, state->waiter);
  return PendingExecution(std::move(state));
}

std::expected<std::string, base::Error> Store::recordExecution(const ExecutionRecord& record) {
  return beginRecordExecution(record).wait();
}

std::expected<void, base::Error> Store::flush() { return impl_->flush(); }

void Store::recordPolicy(const std::string& sha256, const std::string& workflow,
                         const std::string& yaml_text) {
  if (!impl_->firstSightOfPolicy(sha256)) return;  // stored once; no need to queue it again
  impl_->push(PolicyItem{std::make_unique<detail::PolicyRecord>(
      detail::PolicyRecord{sha256, workflow, yaml_text, base::nowMs()})});
}

void Store::recordConnection(ConnectionEvent event) { impl_->pushRow(event); }

void Store::recordRequest(RequestEvent event) { impl_->pushRow(event); }
void Store::recordForward(ForwardEvent event) { impl_->pushRow(event); }
void Store::recordDns(DnsEvent event) { impl_->pushRow(event); }
void Store::recordApproval(ApprovalEvent event) { impl_->pushRow(event); }

bool Store::healthy() const { return impl_->healthy(); }

std::size_t Store::queueDepth() const { return impl_->queueDepth(); }

std::optional<base::Error> Store::failure() const { return impl_->failure(); }

const std::filesystem::path& Store::path() const { return impl_->path(); }

}  // namespace sluice::audit
