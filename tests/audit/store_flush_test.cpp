// Device flushes on the path of a durable receipt: the caller (`sluice run`) waits for the
// receipt's commit, so that commit must cost one flush of the WAL and nothing more. Counted by
// a VFS that wraps SQLite's default one and counts xSync calls per file.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <atomic>
#include <cstring>
#include <string>

#include "audit_test_util.hpp"
#include "sluice/audit/store.hpp"

namespace sluice::audit {
namespace {

using testing::TempDir;

std::atomic<int> g_wal_syncs{0};
std::atomic<int> g_other_syncs{0};

struct CountingFile {
  sqlite3_file base;
  sqlite3_file* real;
  bool wal;
};

sqlite3_file* real(sqlite3_file* f) { return reinterpret_cast<CountingFile*>(f)->real; }

int countingSync(sqlite3_file* f, int flags) {
  (reinterpret_cast<CountingFile*>(f)->wal ? g_wal_syncs : g_other_syncs).fetch_add(1);
  return real(f)->pMethods->xSync(real(f), flags);
}

// Every other method forwards to the real file.
const sqlite3_io_methods kCountingMethods = {
    3,
    [](sqlite3_file* f) { return real(f)->pMethods->xClose(real(f)); },
    [](sqlite3_file* f, void* b, int n, sqlite3_int64 o) {
      return real(f)->pMethods->xRead(real(f), b, n, o);
    },
    [](sqlite3_file* f, const void* b, int n, sqlite3_int64 o) {
      return real(f)->pMethods->xWrite(real(f), b, n, o);
    },
    [](sqlite3_file* f, sqlite3_int64 n) { return real(f)->pMethods->xTruncate(real(f), n); },
    countingSync,
    [](sqlite3_file* f, sqlite3_int64* n) { return real(f)->pMethods->xFileSize(real(f), n); },
    [](sqlite3_file* f, int l) { return real(f)->pMethods->xLock(real(f), l); },
    [](sqlite3_file* f, int l) { return real(f)->pMethods->xUnlock(real(f), l); },
    [](sqlite3_file* f, int* o) { return real(f)->pMethods->xCheckReservedLock(real(f), o); },
    [](sqlite3_file* f, int op, void* a) {
      return real(f)->pMethods->xFileControl(real(f), op, a);
    },
    [](sqlite3_file* f) { return real(f)->pMethods->xSectorSize(real(f)); },
    [](sqlite3_file* f) { return real(f)->pMethods->xDeviceCharacteristics(real(f)); },
    [](sqlite3_file* f, int i, int sz, int ext, void volatile** p) {
      return real(f)->pMethods->xShmMap(real(f), i, sz, ext, p);
    },
    [](sqlite3_file* f, int o, int n, int fl) {
      return real(f)->pMethods->xShmLock(real(f), o, n, fl);
    },
    [](sqlite3_file* f) { real(f)->pMethods->xShmBarrier(real(f)); },
    [](sqlite3_file* f, int del) { return real(f)->pMethods->xShmUnmap(real(f), del); },
    [](sqlite3_file* f, sqlite3_int64 o, int n, void** p) {
      return real(f)->pMethods->xFetch(real(f), o, n, p);
    },
    [](sqlite3_file* f, sqlite3_int64 o, void* p) {
      return real(f)->pMethods->xUnfetch(real(f), o, p);
    },
};

sqlite3_vfs g_counting_vfs;

int countingOpen(sqlite3_vfs* vfs, const char* name, sqlite3_file* f, int flags, int* out) {
  auto* parent = static_cast<sqlite3_vfs*>(vfs->pAppData);
  auto* c = reinterpret_cast<CountingFile*>(f);
  c->real = reinterpret_cast<sqlite3_file*>(c + 1);
  c->wal = (flags & SQLITE_OPEN_WAL) != 0;
  c->base.pMethods = nullptr;  // SQLite calls no xClose for a file whose open failed
  int rc = parent->xOpen(parent, name, c->real, flags, out);
  if (rc == SQLITE_OK && c->real->pMethods) c->base.pMethods = &kCountingMethods;
  return rc;
}

// Makes the counting VFS SQLite's default for the test's lifetime.
class CountingVfs {
 public:
  CountingVfs() {
    parent_ = sqlite3_vfs_find(nullptr);
    g_counting_vfs = *parent_;
    g_counting_vfs.zName = "sluice-counting";
    g_counting_vfs.pNext = nullptr;
    g_counting_vfs.pAppData = parent_;
    g_counting_vfs.szOsFile = static_cast<int>(sizeof(CountingFile)) + parent_->szOsFile;
    g_counting_vfs.xOpen = countingOpen;
    sqlite3_vfs_register(&g_counting_vfs, 1);
  }
  ~CountingVfs() {
    sqlite3_vfs_unregister(&g_counting_vfs);
    sqlite3_vfs_register(parent_, 1);
  }
  CountingVfs(const CountingVfs&) = delete;
  CountingVfs& operator=(const CountingVfs&) = delete;

 private:
  sqlite3_vfs* parent_;
};

TEST(StoreFlushTest, AReceiptOnTheNextRunsStoreCostsOneFlush) {
  CountingVfs vfs;
  TempDir dir;
  auto db = dir / "audit.db";
  StoreOptions o;
  o.checkpoint_on_close = false;  // as `sluice run` opens it
  {
    auto store = testing::openStore(db, o);
    ASSERT_TRUE(store);
    ASSERT_TRUE(store->recordExecution(testing::sampleExecution("exec-1")).has_value());
  }
  // The next run: its open leaves the previous run's few frames in the kept WAL and appends
  // to it. Once the writer has taken its first item (the flush), whatever it does at open is
  // behind it: one sync of the WAL (SQLite syncs its directory with a connection's first), no
  // copy into the database file (whose sync would be counted in g_other_syncs).
  g_wal_syncs = 0;
  g_other_syncs = 0;
  auto store = Store::openAsync(db, o);
  ASSERT_TRUE(store->ready().has_value());
  ASSERT_TRUE(store->flush().has_value());
  EXPECT_EQ(g_wal_syncs.load(), 1);
  EXPECT_EQ(g_other_syncs.load(), 0);
  g_wal_syncs = 0;
  g_other_syncs = 0;
  auto r = store->recordExecution(testing::sampleExecution("exec-2"));
  ASSERT_TRUE(r.has_value()) << r.error().message;
  // The commit's flush of the WAL, and no second one for the header of a restarted WAL.
  EXPECT_EQ(g_wal_syncs.load(), 1);
  EXPECT_EQ(g_other_syncs.load(), 0);
  store.reset();
  testing::RawDb raw(db);
  EXPECT_EQ(raw.integer("SELECT count(*) FROM executions"), 2);
  testing::expectChainIntact(db);
}

}  // namespace
}  // namespace sluice::audit
