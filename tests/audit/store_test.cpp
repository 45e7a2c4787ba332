// The store's write path: round trips, batching, durability of receipts, concurrency with
// backpressure, one chain across tables and across two writers.
#include "sluice/audit/store.hpp"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "audit_test_util.hpp"
#include "sluice/audit/reader.hpp"

namespace sluice::audit {
namespace {

using testing::RawDb;
using testing::TempDir;

TEST(StoreTest, RoundTripsEveryKindOfRow) {
  TempDir dir;
  auto db = dir / "audit.db";
  std::string hash;
  {
    auto store = testing::openStore(db);
    ASSERT_TRUE(store);
    EXPECT_TRUE(store->healthy());
    testing::recordSamplePolicy(*store);
    auto c = testing::sampleConnection(1);
    c.detail = "nearest miss: rule pypi";
    store->recordConnection(c);
    auto denied =
        testing::sampleConnection(2, "", Decision::kDeny);  // standalone proxy: no execution
    store->recordConnection(denied);
    store->recordRequest(testing::sampleRequest(1));
    auto r = store->recordExecution(testing::sampleExecution("exec-1"));
    ASSERT_TRUE(r.has_value()) << r.error().message;
    hash = *r;
    EXPECT_EQ(hash.size(), 64u);
  }
  RawDb raw(db);
  EXPECT_EQ(raw.text("SELECT yaml FROM policies"), testing::kPolicyText);
  EXPECT_EQ(raw.text("SELECT host FROM connections WHERE id = 'c-exec-1-1'"), "pypi.org");
  EXPECT_EQ(raw.text("SELECT detail FROM connections WHERE id = 'c-exec-1-1'"),
            "nearest miss: rule pypi");
  EXPECT_EQ(raw.integer("SELECT bytes_up FROM connections WHERE id = 'c-exec-1-1'"), 1001);
  EXPECT_EQ(raw.integer("SELECT execution_id IS NULL FROM connections WHERE id = 'c--2'"), 1);
  EXPECT_EQ(raw.integer("SELECT rule_id IS NULL FROM connections WHERE id = 'c--2'"), 1);
  EXPECT_EQ(raw.text("SELECT decision FROM connections WHERE id = 'c--2'"), "deny");
  EXPECT_EQ(raw.text("SELECT injected_secrets FROM requests"), R"(["stats_token"])");
  EXPECT_EQ(raw.integer("SELECT status FROM requests"), 200);
  EXPECT_EQ(raw.text("SELECT hash FROM executions WHERE id = 'exec-1'"), hash);
  EXPECT_EQ(raw.text("SELECT argv FROM executions"), R"j(["python3","-c","print(1)"])j");
  EXPECT_EQ(raw.integer("SELECT ended_at - started_at FROM executions"), 250);
  EXPECT_EQ(raw.integer("SELECT limit_hit IS NULL FROM executions"), 1);
  // One chain across the tables, in insertion order, the policy text first.
  EXPECT_EQ(raw.integer("SELECT seq FROM policies"), 1);
  EXPECT_EQ(raw.integer("SELECT seq FROM executions"), 5);
  EXPECT_EQ(raw.text("SELECT prev_hash FROM executions"),
            raw.text("SELECT hash FROM requests WHERE seq = 4"));
  EXPECT_EQ(raw.integer("SELECT seq FROM chain_head"), 5);
  auto v = verify(db);
  ASSERT_TRUE(v.has_value()) << v.error().message;
  EXPECT_TRUE(v->ok) << v->first_broken;
  EXPECT_EQ(v->rows, 5u);
}

// A request sent upstream is on record (forwards) before its exchange ends; the requests row
// completes it. A forward with no requests row (the proxy died mid-exchange) shows as not
// completed, with an execution or without one (a standalone proxy's rows).
TEST(StoreTest, ForwardsAreChainedAndMatchedToTheirRequests) {
  TempDir dir;
  auto db = dir / "audit.db";
  {
    auto store = testing::openStore(db);
    ASSERT_TRUE(store);
    store->recordForward(testing::sampleForward(1));
    store->recordRequest(testing::sampleRequest(1));
    auto resent = testing::sampleForward(2);
    resent.attempt = 2;
    store->recordForward(resent);  // never completed
    ASSERT_TRUE(store->flush().has_value());
    store->recordForward(testing::sampleForward(3, ""));
    store->recordRequest(testing::sampleRequest(3, ""));
    store->recordForward(testing::sampleForward(4, ""));  // never completed
    ASSERT_TRUE(store->flush().has_value());
  }
  RawDb raw(db);
  EXPECT_EQ(raw.integer("SELECT count(*) FROM forwards"), 4);
  EXPECT_EQ(raw.integer("SELECT seq FROM forwards WHERE attempt = 1"), 1);
  EXPECT_EQ(raw.text("SELECT prev_hash FROM requests"),
            raw.text("SELECT hash FROM forwards WHERE seq = 1"));
  EXPECT_EQ(raw.text("SELECT injected_secrets FROM forwards WHERE seq = 1"), R"(["stats_token"])");
  EXPECT_EQ(raw.text("SELECT rule_id FROM forwards WHERE seq = 3"), "stats-api");
  testing::expectChainIntact(db);
  auto v = verify(db);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->rows, 6u);

  auto reader = Reader::open(db);
  ASSERT_TRUE(reader.has_value()) << reader.error().message;
  QueryFilter f;
  f.kind = "forwards";
  auto t = (*reader)->query(f);
  ASSERT_TRUE(t.has_value()) << t.error().message;
  ASSERT_EQ(t->rows.size(), 4u);
  std::size_t completed = t->columns.size();
  for (std::size_t i = 0; i < t->columns.size(); ++i)
    if (t->columns[i] == "completed") completed = i;
  ASSERT_LT(completed, t->columns.size());
  EXPECT_EQ(std::get<std::int64_t>(t->rows[0][completed]), 1);
  EXPECT_EQ(std::get<std::int64_t>(t->rows[1][completed]), 0);
  EXPECT_EQ(std::get<std::int64_t>(t->rows[2][completed]), 1);
  EXPECT_EQ(std::get<std::int64_t>(t->rows[3][completed]), 0);
  f.decision = "allow";
  EXPECT_FALSE((*reader)->query(f).has_value());
}

// The database holds argv, URLs and hosts: a new one (and its -wal and -shm) is the owner's
// only, whatever the umask; with a group, 0640 and that group; an existing file keeps its mode.
TEST(StoreTest, NewDatabaseIsPrivate) {
  TempDir dir;
  const mode_t old_umask = ::umask(022);
  auto db = dir / "audit.db";
  {
    auto store = testing::openStore(db);
    ASSERT_TRUE(store);
    store->recordRequest(testing::sampleRequest(1));
    ASSERT_TRUE(store->flush().has_value());
    for (const char* suffix : {"", "-wal", "-shm"}) {
      struct stat st {};
      ASSERT_EQ(::stat((db.string() + suffix).c_str(), &st), 0) << suffix;
      EXPECT_EQ(st.st_mode & 0777, 0600u) << suffix;
    }
  }
  auto shared = dir / "shared.db";
  {
    StoreOptions o;
    o.group = 4;  // adm, present on Debian; any gid works for root
    auto store = testing::openStore(shared, o);
    ASSERT_TRUE(store);
    struct stat st {};
    ASSERT_EQ(::stat(shared.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0640u);
    if (::geteuid() == 0) {
      EXPECT_EQ(st.st_gid, 4u);
    }
  }
  auto existing = dir / "existing.db";
  { std::ofstream(existing).flush(); }
  ::chmod(existing.c_str(), 0644);
  { ASSERT_TRUE(testing::openStore(existing)); }
  struct stat st {};
  ASSERT_EQ(::stat(existing.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);  // not ours to change; logged as a warning
  ::umask(old_umask);
}

TEST(StoreTest, ReceiptIsCommittedBeforeRecordExecutionReturns) {
  TempDir dir;
  auto db = dir / "audit.db";
  // A long batch interval: only the receipt's own commit can make the rows visible.
  StoreOptions o;
  o.batch_interval = std::chrono::milliseconds(60'000);
  auto store = testing::openStore(db, o);
  ASSERT_TRUE(store);
  store->recordConnection(testing::sampleConnection(1));
  ASSERT_TRUE(store->recordExecution(testing::sampleExecution("exec-1")).has_value());
  RawDb raw(db);  // a second connection sees only committed data
  EXPECT_EQ(raw.integer("SELECT count(*) FROM executions"), 1);
  EXPECT_EQ(raw.integer("SELECT count(*) FROM connections"), 1);
}

TEST(StoreTest, FlushCommitsEverythingQueuedBefore) {
  TempDir dir;
  auto db = dir / "audit.db";
  StoreOptions o;
  o.batch_interval = std::chrono::milliseconds(60'000);
  auto store = testing::openStore(db, o);
  ASSERT_TRUE(store);
  for (int i = 0; i < 100; ++i) store->recordConnection(testing::sampleConnection(i));
  ASSERT_TRUE(store->flush().has_value());
  EXPECT_EQ(RawDb(db).integer("SELECT count(*) FROM connections"), 100);
}

TEST(StoreTest, DestructorDrainsTheQueue) {
  TempDir dir;
  auto db = dir / "audit.db";
  {
    StoreOptions o;
    o.batch_rows = 7;
    auto store = testing::openStore(db, o);
    ASSERT_TRUE(store);
    for (int i = 0; i < 1000; ++i) store->recordConnection(testing::sampleConnection(i));
  }
  EXPECT_EQ(RawDb(db).integer("SELECT count(*) FROM connections"), 1000);
}

// Once per store and once per database: a second session (another process) that records the
// same text adds no row, and the ignored insert takes no seq (the chain stays gapless).
TEST(StoreTest, PolicyTextStoredOnce) {
  TempDir dir;
  auto db = dir / "audit.db";
  for (int session = 0; session < 2; ++session) {
    auto store = testing::openStore(db);
    ASSERT_TRUE(store);
    for (int i = 0; i < 3; ++i) {
      testing::recordSamplePolicy(*store);
    }
    store->recordConnection(testing::sampleConnection(session));
  }
  RawDb raw(db);
  EXPECT_EQ(raw.integer("SELECT count(*) FROM policies"), 1);
  EXPECT_EQ(raw.integer("SELECT seq FROM policies"), 1);
  EXPECT_EQ(raw.text("SELECT group_concat(seq) FROM connections"), "2,3");
  testing::expectChainIntact(db);
}

TEST(StoreTest, PolicyWithAWrongHashIsNotStored) {
  TempDir dir;
  auto db = dir / "audit.db";
  {
    auto store = testing::openStore(db);
    ASSERT_TRUE(store);
    store->recordPolicy(std::string(64, 'b'), "data-analysis", testing::kPolicyText);
    ASSERT_TRUE(store->flush().has_value());
    EXPECT_TRUE(store->healthy());
  }
  EXPECT_EQ(RawDb(db).integer("SELECT count(*) FROM policies"), 0);
  auto v = verify(db);
  ASSERT_TRUE(v.has_value());
  EXPECT_TRUE(v->ok) << v->first_broken;
}

TEST(StoreTest, DuplicateExecutionIdIsAnErrorButTheStoreStaysHealthy) {
  TempDir dir;
  auto db = dir / "audit.db";
  auto store = testing::openStore(db);
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->recordExecution(testing::sampleExecution("exec-1")).has_value());
  auto again = store->recordExecution(testing::sampleExecution("exec-1"));
  ASSERT_FALSE(again.has_value());
  EXPECT_NE(again.error().message.find("UNIQUE"), std::string::npos) << again.error().message;
  EXPECT_EQ(again.error().code, base::Code::kConflict);
  EXPECT_EQ(again.error().cause_code, SQLITE_CONSTRAINT_UNIQUE);  // lost before: only in the text
  EXPECT_TRUE(store->healthy());
  EXPECT_TRUE(store->recordExecution(testing::sampleExecution("exec-2")).has_value());
  store.reset();
  auto v = verify(db);
  ASSERT_TRUE(v.has_value());
  EXPECT_TRUE(v->ok) << v->first_broken;
  EXPECT_EQ(v->rows, 2u);
}

TEST(StoreTest, EmptyExecutionIdIsRefused) {
  TempDir dir;
  auto store = testing::openStore(dir / "audit.db");
  ASSERT_TRUE(store);
  EXPECT_FALSE(store->recordExecution(testing::sampleExecution("")).has_value());
}

// `threads` producers at once, producer t as execution PREFIX-t: for each i below
// `per_thread` a connection, its request when i is a multiple of `request_every`, and after
// every `receipt_every`-th connection a receipt PREFIX-t-rI (it waits for its commit). Returns
// how many receipts were stored.
int produceConcurrently(Store& store, const std::string& prefix, int threads, int per_thread,
                        int request_every, int receipt_every) {
  std::vector<std::thread> producers;
  std::atomic<int> receipts_ok{0};
  for (int t = 0; t < threads; ++t) {
    producers.emplace_back([&, t] {
      const std::string exec = prefix + "-" + std::to_string(t);
      for (int i = 0; i < per_thread; ++i) {
        store.recordConnection(testing::sampleConnection(i, exec));
        if (i % request_every == 0) store.recordRequest(testing::sampleRequest(i, exec));
        if (i % receipt_every == receipt_every - 1 &&
            store.recordExecution(testing::sampleExecution(exec + "-r" + std::to_string(i))))
          receipts_ok.fetch_add(1);
      }
    });
  }
  for (auto& p : producers) p.join();
  return receipts_ok.load();
}

TEST(StoreTest, ConcurrentProducersWithBackpressureLoseNothing) {
  TempDir dir;
  auto db = dir / "audit.db";
  constexpr int kThreads = 6;
  constexpr int kPerThread = 3000;
  {
    StoreOptions o;
    o.queue_capacity = 64;  // tiny: producers block on backpressure constantly
    o.batch_rows = 100;
    auto store = testing::openStore(db, o);
    ASSERT_TRUE(store);
    EXPECT_EQ(produceConcurrently(*store, "exec", kThreads, kPerThread, 2, 1000),
              kThreads * (kPerThread / 1000));
    EXPECT_TRUE(store->healthy());
  }
  RawDb raw(db);
  EXPECT_EQ(raw.integer("SELECT count(*) FROM connections"), kThreads * kPerThread);
  EXPECT_EQ(raw.integer("SELECT count(*) FROM requests"), kThreads * kPerThread / 2);
  EXPECT_EQ(raw.integer("SELECT count(*) FROM executions"), kThreads * (kPerThread / 1000));
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(raw.integer("SELECT count(DISTINCT id) FROM connections WHERE execution_id = 'exec-" +
                          std::to_string(t) + "'"),
              kPerThread);
  }
  auto v = verify(db);
  ASSERT_TRUE(v.has_value());
  EXPECT_TRUE(v->ok) << v->first_broken;
  EXPECT_EQ(v->rows, static_cast<std::uint64_t>(kThreads * kPerThread * 3 / 2 +
                                                kThreads * (kPerThread / 1000)));
}

// Rows stay in the order they were queued, with receipts (which wait for their commit) from
// several threads interleaving with the writer's batches: each producer's connections in
// order, each request after its connection, each receipt after everything its producer queued
// before it.
TEST(StoreTest, ReceiptsFromManyThreadsKeepEveryRowInQueueOrder) {
  TempDir dir;
  auto db = dir / "audit.db";
  constexpr int kThreads = 4;
  constexpr int kPerThread = 600;
  {
    StoreOptions o;
    o.batch_rows = 7;  // small batches: the writer thread writes often too
    auto store = testing::openStore(db, o);
    ASSERT_TRUE(store);
    EXPECT_EQ(produceConcurrently(*store, "order", kThreads, kPerThread, 1, 50),
              kThreads * (kPerThread / 50));
    EXPECT_TRUE(store->healthy());
  }
  RawDb raw(db);
  for (int t = 0; t < kThreads; ++t) {
    const std::string exec = "order-" + std::to_string(t);
    // Connections whose seq order differs from their queue order, requests before their
    // connection, receipts before the rows their producer queued ahead of them.
    EXPECT_EQ(raw.integer("SELECT count(*) FROM connections a JOIN connections b ON "
                          "a.execution_id = b.execution_id AND "
                          "CAST(substr(a.id, length('c-" +
                          exec +
                          "-') + 1) AS INTEGER) < "
                          "CAST(substr(b.id, length('c-" +
                          exec +
                          "-') + 1) AS INTEGER) "
                          "WHERE a.execution_id = '" +
                          exec + "' AND a.seq > b.seq"),
              0);
    EXPECT_EQ(raw.integer("SELECT count(*) FROM requests r JOIN connections c ON "
                          "r.connection_id = c.id WHERE r.execution_id = '" +
                          exec + "' AND r.seq < c.seq"),
              0);
    EXPECT_EQ(raw.integer("SELECT count(*) FROM requests WHERE execution_id = '" + exec + "'"),
              kPerThread);
    for (int i = 49; i < kPerThread; i += 50) {
      const std::string receipt = exec + "-r" + std::to_string(i);
      EXPECT_EQ(raw.integer("SELECT count(*) FROM requests WHERE connection_id = 'c-" + exec + "-" +
                            std::to_string(i) +
                            "' AND seq < (SELECT seq FROM executions WHERE "
                            "id = '" +
                            receipt + "')"),
                1)
          << receipt;
    }
  }
  auto v = verify(db);
  ASSERT_TRUE(v.has_value());
  EXPECT_TRUE(v->ok) << v->first_broken;
}

TEST(StoreTest, FullQueueBlocksTheProducerAndDropsNothing) {
  TempDir dir;
  auto db = dir / "audit.db";
  constexpr int kCapacity = 8;
  constexpr int kEvents = 100;
  std::atomic<int> pushed{0};
  {
    StoreOptions o;
    o.queue_capacity = kCapacity;
    o.busy_timeout = std::chrono::milliseconds(60'000);
    auto store = testing::openStore(db, o);
    ASSERT_TRUE(store);
    RawDb locker(db);
    ASSERT_EQ(locker.exec("BEGIN IMMEDIATE"), "");  // the writer stalls on this lock
    std::thread producer([&] {
      for (int i = 0; i < kEvents; ++i) {
        store->recordConnection(testing::sampleConnection(i));
        pushed.fetch_add(1);
      }
    });
    // The writer holds at most one queue's worth while it waits for the lock, and the queue
    // holds kCapacity more: the producer must block there, however long we give it.
    for (int i = 0; i < 200 && pushed.load() < 2 * kCapacity; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_LE(pushed.load(), 2 * kCapacity);
    EXPECT_TRUE(store->healthy());
    locker.exec("ROLLBACK");
    producer.join();
    EXPECT_EQ(pushed.load(), kEvents);
    EXPECT_TRUE(store->flush().has_value());
  }
  EXPECT_EQ(RawDb(db).integer("SELECT count(*) FROM connections"), kEvents);
}

TEST(StoreTest, TwoWritersOnOneDatabaseKeepOneChain) {
  // Two processes (`sluice run` twice) share a database: each writer re-reads the chain head
  // in its transaction, so the chain stays linear.
  TempDir dir;
  auto db = dir / "audit.db";
  {
    auto a = testing::openStore(db);
    auto b = testing::openStore(db);
    ASSERT_TRUE(a && b);
    std::thread ta([&] {
      for (int i = 0; i < 500; ++i) {
        a->recordConnection(testing::sampleConnection(i, "exec-a"));
        if (i % 50 == 0) {
          ASSERT_TRUE(a->flush().has_value());
        }
      }
    });
    std::thread tb([&] {
      for (int i = 0; i < 500; ++i) {
        b->recordConnection(testing::sampleConnection(i, "exec-b"));
        if (i % 50 == 0) {
          ASSERT_TRUE(b->flush().has_value());
        }
      }
    });
    ta.join();
    tb.join();
  }
  auto v = verify(db);
  ASSERT_TRUE(v.has_value());
  EXPECT_TRUE(v->ok) << v->first_broken;
  EXPECT_EQ(v->rows, 1000u);
}

TEST(StoreTest, ReadOnlyStoreRefusesRecords) {
  TempDir dir;
  auto db = dir / "audit.db";
  testing::populate(db);
  StoreOptions o;
  o.read_only = true;
  auto store = testing::openStore(db, o);
  ASSERT_TRUE(store);
  EXPECT_FALSE(store->healthy());
  EXPECT_FALSE(store->recordExecution(testing::sampleExecution("exec-9")).has_value());
  EXPECT_FALSE(store->flush().has_value());
}

TEST(StoreTest, OpenAsyncQueuesEventsUntilTheDatabaseIsOpen) {
  TempDir dir;
  auto db = dir / "audit.db";
  {
    auto store = Store::openAsync(db);
    ASSERT_TRUE(store);
    // Recorded before ready(): queued, then written once the writer thread has opened.
    testing::recordSamplePolicy(*store);
    store->recordConnection(testing::sampleConnection(1));
    auto ready = store->ready();
    ASSERT_TRUE(ready.has_value()) << ready.error().message;
    EXPECT_TRUE(store->healthy());
    auto r = store->recordExecution(testing::sampleExecution("exec-1"));
    ASSERT_TRUE(r.has_value()) << r.error().message;
  }
  RawDb raw(db);
  EXPECT_EQ(raw.integer("SELECT count(*) FROM connections"), 1);
  EXPECT_EQ(raw.integer("SELECT count(*) FROM executions"), 1);
  EXPECT_EQ(raw.integer("SELECT count(*) FROM policies"), 1);
  testing::expectChainIntact(db);
}

TEST(StoreTest, OpenAsyncFailureFailsTheStoreAndNamesThePath) {
  TempDir dir;
  auto db = dir / "missing-dir" / "audit.db";
  auto store = Store::openAsync(db);
  ASSERT_TRUE(store);
  store->recordConnection(testing::sampleConnection(1));  // queued before the failure is known
  auto ready = store->ready();
  ASSERT_FALSE(ready.has_value());
  EXPECT_NE(ready.error().message.find(db.string()), std::string::npos) << ready.error().message;
  EXPECT_FALSE(store->healthy());
  auto r = store->recordExecution(testing::sampleExecution("exec-1"));
  EXPECT_FALSE(r.has_value());
  EXPECT_FALSE(std::filesystem::exists(db));
}

namespace {

// The nice value of this process's audit writer thread (named sluice-audit), if there is one.
std::optional<int> writerNice() {
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    std::getline(comm, name);
    if (name != "sluice-audit") continue;
    std::ifstream stat(task.path() / "stat");
    std::string line;
    std::getline(stat, line);
    std::istringstream fields(line.substr(line.rfind(')') + 2));
    std::string field;
    for (int i = 3; i <= 19 && fields >> field; ++i) {
    }
    return std::stoi(field);  // field 19: nice
  }
  return std::nullopt;
}

// Whether a thread of this process may lower its nice below the caller's (root, CAP_SYS_NICE
// or RLIMIT_NICE): asked of the kernel on a thread of its own, as the store does.
bool mayLowerNice() {
  bool may = false;
  std::thread([&] {
    const auto self = static_cast<id_t>(::gettid());
    const int nice = ::getpriority(PRIO_PROCESS, self);
    may = nice > -20 && ::setpriority(PRIO_PROCESS, self, nice - 1) == 0;
  }).join();
  return may;
}

}  // namespace

// An asynchronous open yields the cores to its caller (nice 19) while it opens, when it can take
// its priority back, and the writer then works at the caller's priority: a writer left at
// nice 19 would fall behind a busy sandbox's programs.
TEST(StoreTest, OpenAsyncYieldsWhileOpeningAndWritesAtTheCallersPriority) {
  TempDir dir;
  auto db = dir / "audit.db";
  ASSERT_TRUE(Store::open(db));
  const int caller = ::getpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()));
  const bool yields = caller < 19 && mayLowerNice();
  RawDb holder(db);
  ASSERT_EQ(holder.exec("BEGIN IMMEDIATE"), "");  // the open's schema check waits for this
  auto store = Store::openAsync(db);
  ASSERT_TRUE(store);
  std::optional<int> opening;
  for (int i = 0; i < 500 && !opening; ++i) {
    opening = writerNice();
    if (!opening) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  // The thread is named just after it starts: give it the moment to lower its priority.
  for (int i = 0; i < 500 && yields && opening != 19; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    opening = writerNice();
  }
  ASSERT_TRUE(opening.has_value()) << "no sluice-audit thread";
  EXPECT_EQ(*opening, yields ? 19 : caller);
  ASSERT_EQ(holder.exec("COMMIT"), "");
  ASSERT_TRUE(store->ready().has_value());
  ASSERT_TRUE(store->flush().has_value());  // the writer loop runs: the open is over
  EXPECT_EQ(writerNice(), caller);
  auto r = store->recordExecution(testing::sampleExecution("exec-1"));
  ASSERT_TRUE(r.has_value()) << r.error().message;
}

// (checkpoint on close, opened with openAsync as `sluice run` does)
class ShortSessions : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(ShortSessions, PersistentWalStaysSmall) {
  // `sluice run` opens, writes one execution and closes, thousands of times a day. The WAL
  // file is kept between sessions (deleting it costs milliseconds); it must not grow, whether
  // the close copies it into the database (default) or leaves that to the next open (run).
  // openAsync copies the previous frames after reporting the open, before its first write.
  TempDir dir;
  auto db = dir / "audit.db";
  StoreOptions o;
  const auto [checkpoint_on_close, async] = GetParam();
  o.checkpoint_on_close = checkpoint_on_close;
  const int kSessions = 60;
  for (int i = 0; i < kSessions; ++i) {
    auto store = async ? Store::openAsync(db, o) : testing::openStore(db, o);
    ASSERT_TRUE(store);
    std::string id = "exec-" + std::to_string(i);
    for (int c = 0; c < 5; ++c) store->recordConnection(testing::sampleConnection(c, id));
    auto r = store->recordExecution(testing::sampleExecution(id));
    ASSERT_TRUE(r.has_value()) << r.error().message;
  }
  auto wal = dir / "audit.db-wal";
  ASSERT_TRUE(std::filesystem::exists(wal));
  // The open copies the WAL once it holds more than 256 KiB of frames, and a session adds a
  // few dozen KiB; 60 sessions appended without a copy would be several times this.
  EXPECT_LT(std::filesystem::file_size(wal), 512u * 1024u);
  RawDb raw(db);
  EXPECT_EQ(raw.integer("SELECT count(*) FROM executions"), kSessions);
  EXPECT_EQ(raw.integer("SELECT count(*) FROM connections"), kSessions * 5);
  testing::expectChainIntact(db);
}

INSTANTIATE_TEST_SUITE_P(CheckpointOnCloseAndAsync, ShortSessions,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()));

TEST(StoreTest, WithoutCheckpointOnCloseABigWalIsCopiedByTheNextOpen) {
  // checkpoint_on_close = false: the rows are durable in the -wal file and readable through
  // SQLite at once; the .db file alone gets them when a writer opens with more than 256 KiB of
  // frames in the WAL (a small WAL is appended to: the copy costs flushes).
  TempDir dir;
  auto db = dir / "audit.db";
  int copies = 0;
  auto executionsInDbAlone = [&] {
    auto copy = dir / ("copy-" + std::to_string(++copies));
    std::filesystem::create_directories(copy);
    std::filesystem::copy_file(db, copy / "audit.db");
    return RawDb(copy / "audit.db").integer("SELECT count(*) FROM executions");
  };
  StoreOptions o;
  o.checkpoint_on_close = false;
  {
    auto store = testing::openStore(db, o);
    ASSERT_TRUE(store->recordExecution(testing::sampleExecution("exec-1")).has_value());
  }
  // (Copied first: a read-write connection closing last, as RawDb does, would checkpoint.)
  EXPECT_EQ(executionsInDbAlone(), 0);
  testing::expectChainIntact(db);  // read-only, through the WAL
  {
    auto store = testing::openStore(db, o);  // a small WAL: left as it is
    for (int i = 0; i < 2000; ++i) store->recordConnection(testing::sampleConnection(i));
    ASSERT_TRUE(store->recordExecution(testing::sampleExecution("exec-2")).has_value());
  }
  EXPECT_EQ(executionsInDbAlone(), 0);
  ASSERT_GT(std::filesystem::file_size(dir / "audit.db-wal"), 256u * 1024u);
  { auto store = testing::openStore(db, o); }  // the next writer's open copies the WAL
  EXPECT_EQ(executionsInDbAlone(), 2);
  testing::expectChainIntact(db);
}

TEST(StoreTest, ABigSessionLeavesNoBigWalBehind) {
  // A long-running proxy's session can leave megabytes of (already copied) frames in the kept
  // WAL, which the next open would read and copy again: closing empties a WAL above 4 MiB.
  TempDir dir;
  auto db = dir / "audit.db";
  auto wal = dir / "audit.db-wal";
  std::uintmax_t before_close = 0;
  {
    auto store = testing::openStore(db);
    ASSERT_TRUE(store);
    for (int i = 0; i < 40000; ++i) store->recordConnection(testing::sampleConnection(i));
    ASSERT_TRUE(store->flush().has_value());
    before_close = std::filesystem::file_size(wal);
  }
  EXPECT_GT(before_close, 4u << 20) << "the session did not grow the WAL enough to test this";
  ASSERT_TRUE(std::filesystem::exists(wal));
  EXPECT_EQ(std::filesystem::file_size(wal), 0u);
  RawDb raw(db);
  EXPECT_EQ(raw.integer("SELECT count(*) FROM connections"), 40000);
  testing::expectChainIntact(db);
}

}  // namespace
}  // namespace sluice::audit
