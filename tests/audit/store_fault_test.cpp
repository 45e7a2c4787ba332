// Faults: unwritable path, read-only file system, disk full, corrupt file, locked database.
// Each must give a clear error naming the path and the cause, and a failed store must tell
// producers (healthy() false) so the proxy can fail closed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <iostream>

#include "audit_test_util.hpp"
#include "sluice/audit/store.hpp"

namespace sluice::audit {
namespace {

using testing::RawDb;
using testing::TempDir;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(StoreFaultTest, MissingDirectoryNamesThePath) {
  TempDir dir;
  auto db = dir / "no/such/dir/audit.db";
  auto s = Store::open(db);
  ASSERT_FALSE(s.has_value());
  EXPECT_TRUE(contains(s.error().message, db.string())) << s.error().message;
  EXPECT_TRUE(contains(s.error().message, "does not exist")) << s.error().message;
}

TEST(StoreFaultTest, DirectoryInsteadOfFileNamesThePath) {
  TempDir dir;
  auto s = Store::open(dir.path());
  ASSERT_FALSE(s.has_value());
  EXPECT_TRUE(contains(s.error().message, dir.path().string())) << s.error().message;
}

TEST(StoreFaultTest, CorruptFileIsRefused) {
  TempDir dir;
  auto db = dir / "audit.db";
  {
    std::ofstream f(db, std::ios::binary);
    for (int i = 0; i < 1024; ++i) f << "garbage!";
  }
  auto s = Store::open(db);
  ASSERT_FALSE(s.has_value());
  EXPECT_TRUE(contains(s.error().message, db.string())) << s.error().message;
  EXPECT_TRUE(contains(s.error().message, "not a database")) << s.error().message;
  // The one error type: a class a caller can act on, and SQLite's own code beside the message.
  EXPECT_EQ(s.error().code, base::Code::kIntegrity);
  EXPECT_EQ(s.error().cause_code, SQLITE_NOTADB);
  auto v = verify(db);
  ASSERT_FALSE(v.has_value());
  EXPECT_TRUE(contains(v.error().message, "not a database")) << v.error().message;
  EXPECT_EQ(v.error().code, base::Code::kIntegrity);
  EXPECT_EQ(v.error().cause_code, SQLITE_NOTADB);
}

TEST(StoreFaultTest, CorruptPagesAreReportedByVerify) {
  TempDir dir;
  auto db = dir / "audit.db";
  testing::populate(db, 200);
  // The store keeps its WAL file (persistent WAL), and its frames, already copied into the
  // database, stay readable until the next writer restarts the WAL; they would mask the
  // damage below. Empty it, as an auditor copying only the .db file would see it.
  { EXPECT_EQ(RawDb(db).exec("PRAGMA wal_checkpoint(TRUNCATE)"), ""); }
  {
    // Overwrite the middle of the file (table pages), keeping the header intact.
    std::fstream f(db, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(8192);
    std::string junk(8192, '\x5a');
    f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }
  auto v = verify(db);
  // Either SQLite detects the corruption (error naming the path) or the chain check does.
  if (v.has_value()) {
    EXPECT_FALSE(v->ok);
  } else {
    EXPECT_TRUE(contains(v.error().message, db.string())) << v.error().message;
  }
}

TEST(StoreFaultTest, LockedDatabaseAtOpenIsAClearError) {
  TempDir dir;
  auto db = dir / "audit.db";
  { ASSERT_TRUE(testing::openStore(db)); }
  RawDb locker(db);
  ASSERT_EQ(locker.exec("BEGIN EXCLUSIVE"), "");
  StoreOptions o;
  o.busy_timeout = std::chrono::milliseconds(50);
  auto s = Store::open(db, o);
  ASSERT_FALSE(s.has_value());
  EXPECT_TRUE(contains(s.error().message, db.string())) << s.error().message;
  EXPECT_TRUE(contains(s.error().message, "locked")) << s.error().message;
  locker.exec("ROLLBACK");
}

TEST(StoreFaultTest, LockHeldTooLongFailsTheStoreClosed) {
  TempDir dir;
  auto db = dir / "audit.db";
  StoreOptions o;
  o.busy_timeout = std::chrono::milliseconds(50);
  auto store = testing::openStore(db, o);
  ASSERT_TRUE(store);
  RawDb locker(db);
  ASSERT_EQ(locker.exec("BEGIN IMMEDIATE"), "");  // another writer holds the write lock
  store->recordConnection(testing::sampleConnection(1));
  auto r = store->recordExecution(testing::sampleExecution("exec-1"));
  ASSERT_FALSE(r.has_value());
  EXPECT_TRUE(contains(r.error().message, "locked")) << r.error().message;
  EXPECT_FALSE(store->healthy());
  ASSERT_TRUE(store->failure().has_value());
  EXPECT_TRUE(contains(store->failure()->message, db.string()));
  // Producers are not blocked once the store failed.
  store->recordConnection(testing::sampleConnection(2));
  EXPECT_FALSE(store->flush().has_value());
  locker.exec("ROLLBACK");
}

TEST(StoreFaultTest, ReadOnlyFileSystem) {
  if (geteuid() != 0) SLUICE_SKIP_OR_FAIL("needs root to mount a tmpfs");
  testing::TmpfsMount fs("size=4m,mode=0755");
  if (!fs.mounted()) SLUICE_SKIP_OR_FAIL("cannot mount tmpfs (no CAP_SYS_ADMIN?)");
  auto db = fs.path() / "audit.db";
  {
    auto store = testing::openStore(db);
    ASSERT_TRUE(store);
    ASSERT_TRUE(store->recordExecution(testing::sampleExecution("exec-1")).has_value());
  }
  ASSERT_TRUE(fs.remountReadOnly());
  auto s = Store::open(db);
  ASSERT_FALSE(s.has_value());
  EXPECT_TRUE(contains(s.error().message, db.string())) << s.error().message;
  EXPECT_TRUE(contains(s.error().message, "read-only")) << s.error().message;
  EXPECT_EQ(s.error().code, base::Code::kIo);
  EXPECT_NE(s.error().cause_code, 0);
  auto fresh = Store::open(fs.path() / "new.db");
  ASSERT_FALSE(fresh.has_value());
  EXPECT_TRUE(contains(fresh.error().message, "Read-only file system")) << fresh.error().message;
}

TEST(StoreFaultTest, DiskFullFailsClosedAndKeepsTheChainIntact) {
  if (geteuid() != 0) SLUICE_SKIP_OR_FAIL("needs root to mount a tmpfs");
  testing::TmpfsMount fs("size=512k,mode=0755");
  if (!fs.mounted()) SLUICE_SKIP_OR_FAIL("cannot mount tmpfs (no CAP_SYS_ADMIN?)");
  auto db = fs.path() / "audit.db";
  {
    StoreOptions o;
    o.batch_rows = 16;
    auto store = testing::openStore(db, o);
    ASSERT_TRUE(store);
    ASSERT_TRUE(store->recordExecution(testing::sampleExecution("before")).has_value());
    // 2 KiB per row; 512 KiB fills within a few hundred rows. Bounded loop.
    for (int i = 0; i < 5000 && store->healthy(); ++i) {
      auto c = testing::sampleConnection(i);
      c.detail = std::string(2048, 'x');
      store->recordConnection(c);
      if (i % 16 == 15) (void)store->flush();
    }
    EXPECT_FALSE(store->healthy());
    ASSERT_TRUE(store->failure().has_value());
    std::string msg = store->failure()->message;
    EXPECT_TRUE(contains(msg, db.string())) << msg;
    EXPECT_TRUE(contains(msg, "full")) << msg;
    auto r = store->recordExecution(testing::sampleExecution("after"));
    ASSERT_FALSE(r.has_value());
    EXPECT_TRUE(contains(r.error().message, "full")) << r.error().message;
  }
  // What was committed before the failure is intact.
  testing::expectChainIntact(db);
  EXPECT_EQ(RawDb(db).integer("SELECT count(*) FROM executions WHERE id = 'before'"), 1);
}

}  // namespace
}  // namespace sluice::audit
