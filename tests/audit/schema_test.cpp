// Schema creation, versioning and refusal of newer or foreign databases.
#include <gtest/gtest.h>

#include <fstream>

#include "audit_test_util.hpp"
#include "sluice/audit/signing.hpp"
#include "sluice/audit/store.hpp"

namespace sluice::audit {
namespace {

using testing::RawDb;
using testing::TempDir;

// Every index of a database, by name with its SQL: a migrated database must end with a new
// one's.
const std::string kIndexes =
    "SELECT group_concat(name || ':' || coalesce(sql, ''), '; ') FROM "
    "(SELECT name, sql FROM sqlite_master WHERE type = 'index' ORDER BY name)";

/// SQLite's plan for `sql` (EXPLAIN QUERY PLAN), its steps' details run together.
std::string queryPlan(RawDb& raw, const std::string& sql) {
  std::string plan;
  sqlite3_stmt* q = nullptr;
  if (sqlite3_prepare_v2(raw.get(), ("EXPLAIN QUERY PLAN " + sql).c_str(), -1, &q, nullptr) !=
      SQLITE_OK)
    return "cannot prepare: " + std::string(sqlite3_errmsg(raw.get()));
  while (sqlite3_step(q) == SQLITE_ROW) {
    plan += reinterpret_cast<const char*>(sqlite3_column_text(q, 3));
    plan += "; ";
  }
  sqlite3_finalize(q);
  return plan;
}

/// A new database (fresh.db) and one with the same rows (audit.db) that `undo` takes back to
/// schema `version`, for the test's next open to migrate.
void populateNewAndOld(const TempDir& dir, const std::string& undo, int version) {
  testing::populate(dir / "fresh.db");
  testing::populate(dir / "audit.db");
  ASSERT_EQ(RawDb(dir / "audit.db").exec(undo + "PRAGMA user_version = " + std::to_string(version)),
            "");
}

/// After an index migration: audit.db is at the current version with exactly the indexes of
/// the new database fresh.db (populateNewAndOld).
void expectIndexesOfANewDatabase(const TempDir& dir) {
  RawDb raw(dir / "audit.db");
  EXPECT_EQ(raw.integer("PRAGMA user_version"), kSchemaVersion);
  EXPECT_EQ(raw.text(kIndexes), RawDb(dir / "fresh.db").text(kIndexes));
}

/// A new database (fresh.db) and a version-5 one (migrated.db) that `downgrade` turns back into
/// the version a migration starts from; opening migrated.db migrates it, and then each of
/// `names` must have the same `what` (an expression over sqlite_master's columns) in both.
void expectMigrationCreatesWhatANewDatabaseHas(const TempDir& dir, const std::string& downgrade,
                                               std::initializer_list<std::string> names,
                                               const std::string& what) {
  auto fresh = dir / "fresh.db";
  auto migrated = dir / "migrated.db";
  testing::populate(fresh);
  testing::populate(migrated, 5, false);
  ASSERT_EQ(testing::addVersion5Policy(RawDb(migrated).get()), "");
  ASSERT_EQ(RawDb(migrated).exec(downgrade), "");
  ASSERT_TRUE(testing::openStore(migrated));
  for (const std::string& name : names) {
    const std::string sql = "SELECT " + what + " FROM sqlite_master WHERE name = '" + name + "'";
    const std::string want = RawDb(fresh).text(sql);
    EXPECT_FALSE(want.empty()) << name;
    EXPECT_EQ(RawDb(migrated).text(sql), want) << name;
  }
}

TEST(SchemaTest, NewDatabaseGetsVersionApplicationIdAndWal) {
  TempDir dir;
  auto db = dir / "audit.db";
  { ASSERT_TRUE(testing::openStore(db)); }
  RawDb raw(db);
  EXPECT_EQ(raw.integer("PRAGMA user_version"), kSchemaVersion);
  EXPECT_EQ(raw.integer("PRAGMA application_id"), 0x534C4345);
  EXPECT_EQ(raw.text("PRAGMA journal_mode"), "wal");
  for (std::string t : {"policies", "executions", "connections", "requests", "forwards",
                        "dns_queries", "approvals", "checkpoints", "chain_head"}) {
    EXPECT_EQ(raw.integer("SELECT count(*) FROM sqlite_master WHERE name = '" + t + "'"), 1) << t;
  }
}

TEST(SchemaTest, EmptyFileIsInitialised) {
  TempDir dir;
  auto db = dir / "audit.db";
  { std::ofstream(db).flush(); }  // zero bytes: version 0, migrated to the current version
  ASSERT_TRUE(testing::openStore(db));
  RawDb raw(db);
  EXPECT_EQ(raw.integer("PRAGMA user_version"), kSchemaVersion);
}

TEST(SchemaTest, ReopenKeepsRowsAndChain) {
  TempDir dir;
  auto db = dir / "audit.db";
  testing::populate(db);
  {
    auto store = testing::openStore(db);
    ASSERT_TRUE(store);
    store->recordConnection(testing::sampleConnection(99, "exec-3"));
    ASSERT_TRUE(store->recordExecution(testing::sampleExecution("exec-3")).has_value());
  }
  RawDb raw(db);
  EXPECT_EQ(raw.integer("SELECT count(*) FROM executions"), 3);
  testing::expectChainIntact(db);
}

// A version-1 database (no forwards table) is migrated in place on open, keeping its rows and
// its chain, and the chain goes on across the migration.
TEST(SchemaTest, VersionOneDatabaseIsMigrated) {
  TempDir dir;
  auto db = dir / "audit.db";
  testing::populate(db, 5, false);
  {
    RawDb raw(db);
    ASSERT_EQ(testing::addVersion5Policy(raw.get()), "");
    ASSERT_EQ(raw.exec(testing::kUndoVersion7 +
                       "DROP TABLE approvals; DROP TABLE checkpoints; DROP TABLE dns_queries; "
                       "DROP TABLE forwards; DROP INDEX "
                       "executions_caller; ALTER TABLE "
                       "executions DROP COLUMN session_id; ALTER TABLE executions DROP COLUMN "
                       "caller; PRAGMA user_version = 1"),
              "");
  }
  {
    auto store = testing::openStore(db);
    ASSERT_TRUE(store);
    store->recordForward(testing::sampleForward(50, "exec-3"));
    store->recordRequest(testing::sampleRequest(50, "exec-3"));
    ASSERT_TRUE(store->recordExecution(testing::sampleExecution("exec-3")).has_value());
  }
  RawDb raw(db);
  EXPECT_EQ(raw.integer("PRAGMA user_version"), kSchemaVersion);
  EXPECT_EQ(raw.integer("SELECT count(*) FROM executions"), 3);
  // 22 rows, then the old policy (chained by the 5 -> 6 step), then the new rows.
  EXPECT_EQ(raw.integer("SELECT seq FROM policies"), 23);
  EXPECT_EQ(raw.integer("SELECT seq FROM forwards"), 24);
  testing::expectChainIntact(db);
}

// Version 3 reads caller and session_id out of the receipt: queryable, and covered by the
// row's hash (an edited receipt breaks the chain). A version-2 database gains them in place.
TEST(SchemaTest, CallerAndSessionAreColumnsFromTheReceipt) {
  TempDir dir;
  auto db = dir / "audit.db";
  testing::populate(db, 5, false);
  {
    RawDb raw(db);
    ASSERT_EQ(testing::addVersion5Policy(raw.get()), "");
    ASSERT_EQ(raw.exec(testing::kUndoVersion7 +
                       "DROP TABLE approvals; DROP TABLE checkpoints; DROP TABLE dns_queries; "
                       "DROP INDEX executions_caller; ALTER TABLE "
                       "executions DROP COLUMN session_id; ALTER TABLE executions DROP COLUMN "
                       "caller; PRAGMA user_version = 2"),
              "");
  }
  {
    auto store = testing::openStore(db);
    ASSERT_TRUE(store);
    auto e = testing::sampleExecution("exec-9");
    e.receipt_json = R"({"execution_id":"exec-9","caller":"uid:1000","session_id":"se-1"})";
    ASSERT_TRUE(store->recordExecution(e).has_value());
  }
  RawDb raw(db);
  EXPECT_EQ(raw.integer("PRAGMA user_version"), kSchemaVersion);
  EXPECT_EQ(raw.text("SELECT caller FROM executions WHERE id = 'exec-9'"), "uid:1000");
  EXPECT_EQ(raw.text("SELECT session_id FROM executions WHERE id = 'exec-9'"), "se-1");
  EXPECT_EQ(raw.integer("SELECT count(*) FROM executions WHERE caller IS NULL"), 2);
  testing::expectChainIntact(db);
  raw.exec("UPDATE executions SET receipt = replace(receipt, 'uid:1000', 'uid:0')");
  auto v = verify(db);
  ASSERT_TRUE(v.has_value());
  EXPECT_FALSE(v->ok);
}

// Version 4 adds dns_queries (sluice's DNS) to the one chain; a version-3 database gains it in
// place and the chain goes on through DNS rows; an edited DNS row breaks it.
TEST(SchemaTest, VersionThreeGainsDnsQueriesInTheChain) {
  TempDir dir;
  auto db = dir / "audit.db";
  testing::populate(db, 5, false);
  {
    RawDb raw(db);
    ASSERT_EQ(testing::addVersion5Policy(raw.get()), "");
    ASSERT_EQ(raw.exec(testing::kUndoVersion7 +
                       "DROP TABLE approvals; DROP TABLE checkpoints; DROP TABLE dns_queries; "
                       "PRAGMA user_version = 3"),
              "");
  }
  {
    auto store = testing::openStore(db);
    ASSERT_TRUE(store);
    store->recordDns(testing::sampleDns(1, "exec-3"));
    store->recordDns(testing::sampleDns(2, "exec-3", Decision::kDeny));
    store->recordConnection(testing::sampleConnection(60, "exec-3"));
    ASSERT_TRUE(store->recordExecution(testing::sampleExecution("exec-3")).has_value());
  }
  RawDb raw(db);
  EXPECT_EQ(raw.integer("PRAGMA user_version"), kSchemaVersion);
  EXPECT_EQ(raw.integer("SELECT count(*) FROM dns_queries"), 2);
  EXPECT_EQ(raw.text("SELECT answer FROM dns_queries WHERE decision = 'deny'"), "NXDOMAIN");
  EXPECT_EQ(raw.text("SELECT name FROM dns_queries WHERE seq = (SELECT min(seq) FROM dns_queries)"),
            "q1.example");
  testing::expectChainIntact(db);
  raw.exec("UPDATE dns_queries SET answer = 'NXDOMAIN' WHERE decision = 'allow'");
  auto v = verify(db);
  ASSERT_TRUE(v.has_value());
  EXPECT_FALSE(v->ok);
  EXPECT_NE(v->first_broken.find("dns_queries"), std::string::npos) << v->first_broken;
}

// Version 5 adds approvals (issue 14) to the one chain and the checkpoints table (issue 15); a
// version-4 database gains both in place, its chain goes on through approvals rows, and an
// edited or deleted approvals row is named by verify.
TEST(SchemaTest, VersionFourGainsApprovalsInTheChain) {
  TempDir dir;
  auto db = dir / "audit.db";
  testing::populate(db, 5, false);
  {
    RawDb raw(db);
    ASSERT_EQ(testing::addVersion5Policy(raw.get()), "");
    ASSERT_EQ(raw.exec(testing::kUndoVersion7 +
                       "DROP TABLE approvals; DROP TABLE checkpoints; PRAGMA user_version = 4"),
              "");
  }
  {
    auto store = testing::openStore(db);
    ASSERT_TRUE(store);
    store->recordApproval(testing::sampleApproval(0, "exec-3"));
    store->recordConnection(testing::sampleConnection(70, "exec-3"));
    store->recordApproval(testing::sampleApproval(1, "exec-3"));
    ASSERT_TRUE(store->recordExecution(testing::sampleExecution("exec-3")).has_value());
  }
  RawDb raw(db);
  EXPECT_EQ(raw.integer("PRAGMA user_version"), kSchemaVersion);
  EXPECT_EQ(raw.integer("SELECT count(*) FROM approvals"), 2);
  EXPECT_EQ(raw.integer("SELECT count(*) FROM checkpoints"), 0);
  // A tunnel's approval stores NULL method/path, an allowed one a NULL reason.
  EXPECT_EQ(raw.integer("SELECT count(*) FROM approvals WHERE method IS NULL AND path IS NULL "
                        "AND decision = 'deny' AND reason = 'approval_timeout'"),
            1);
  EXPECT_EQ(raw.integer("SELECT count(*) FROM approvals WHERE reason IS NULL AND method = 'POST'"),
            1);
  // The chain runs through them: 22 rows from populate(), the old policy (chained by the 5 -> 6
  // step), then approval, connection, approval.
  EXPECT_EQ(raw.integer("SELECT seq FROM approvals WHERE decision = 'allow'"), 24);
  EXPECT_EQ(raw.integer("SELECT seq FROM approvals WHERE decision = 'deny'"), 26);
  testing::expectChainIntact(db);

  raw.exec("UPDATE approvals SET decided_by = 'uid:0' WHERE decision = 'allow'");
  auto v = verify(db);
  ASSERT_TRUE(v.has_value());
  EXPECT_FALSE(v->ok);
  EXPECT_NE(v->first_broken.find("approvals seq 24"), std::string::npos) << v->first_broken;
}

TEST(SchemaTest, VersionFiveMigrationCreatesWhatANewDatabaseHas) {
  // The 4 -> 5 migration repeats schemas/audit.sql's approvals and checkpoints: they must not
  // drift apart, or migrated and new databases differ.
  TempDir dir;
  expectMigrationCreatesWhatANewDatabaseHas(
      dir,
      testing::kUndoVersion7 +
          "DROP TABLE approvals; DROP TABLE checkpoints; PRAGMA user_version = 4",
      {"approvals", "approvals_execution", "checkpoints", "checkpoints_position"}, "sql");
}

// Version 6 (issue 21) makes policies rows of the chain. A signed version-5 store gains its old
// policy rows at the end of the chain (loaded_at kept) and its checkpoints numbered in position
// order; it then verifies with the key, and an edited loaded_at, which version 5 could not see,
// is caught. Readers refuse the version-5 store until a writer has migrated it.
TEST(SchemaTest, VersionFiveStoreChainsItsPoliciesAndVerifiesSigned) {
  TempDir dir;
  auto db = dir / "audit.db";
  auto keys = testing::generateKeys();
  ASSERT_TRUE(keys.key && keys.pub);
  StoreOptions o = keys.options();
  o.checkpoint_rows = 5;
  {
    auto store = testing::openStore(db, o);
    ASSERT_TRUE(store);
    for (int i = 0; i < 12; ++i) {
      store->recordConnection(testing::sampleConnection(i));
      ASSERT_TRUE(store->flush().has_value());
    }
  }
  {
    RawDb raw(db);
    ASSERT_EQ(testing::addVersion5Policy(raw.get(), 1'700'000'000'000), "");
    // Two signing writers raced: the checkpoint at position 5 got the highest number.
    ASSERT_EQ(
        raw.exec(testing::kUndoVersion7 + "UPDATE checkpoints SET seq = 99 WHERE position = 5; "
                                          "UPDATE checkpoints SET seq = seq - 1 WHERE seq < 99; "
                                          "PRAGMA user_version = 5"),
        "");
    ASSERT_EQ(raw.text("SELECT group_concat(seq) FROM (SELECT seq FROM checkpoints ORDER BY "
                       "position)"),
              "99,1,2");
  }
  auto old = verify(db, keys.pub.get());
  ASSERT_FALSE(old.has_value());
  EXPECT_NE(old.error().message.find("version 5 is older"), std::string::npos)
      << old.error().message;

  { ASSERT_TRUE(testing::openStore(db, o)); }
  RawDb raw(db);
  EXPECT_EQ(raw.integer("PRAGMA user_version"), kSchemaVersion);
  EXPECT_EQ(raw.integer("SELECT seq FROM policies"), 13);
  EXPECT_EQ(raw.integer("SELECT loaded_at FROM policies"), 1'700'000'000'000);
  EXPECT_EQ(raw.integer("SELECT count(*) FROM sqlite_master WHERE name = 'policies_v5'"), 0);
  // Renumbered 1, 2, 3 in position order; the writer then signed the policy row (position 13).
  EXPECT_EQ(raw.text("SELECT group_concat(position) FROM (SELECT position FROM checkpoints "
                     "ORDER BY seq)"),
            "5,10,12,13");
  auto v = verify(db, keys.pub.get());
  ASSERT_TRUE(v.has_value()) << v.error().message;
  EXPECT_TRUE(v->ok) << v->first_broken;
  EXPECT_EQ(v->rows, 13u);
  EXPECT_EQ(v->unsigned_tail, 0u);

  raw.exec("UPDATE policies SET loaded_at = loaded_at + 1");
  v = verify(db, keys.pub.get());
  ASSERT_TRUE(v.has_value());
  EXPECT_FALSE(v->ok);
  EXPECT_NE(v->first_broken.find("policies seq 13"), std::string::npos) << v->first_broken;
}

TEST(SchemaTest, VersionSixMigrationCreatesWhatANewDatabaseHas) {
  // The 5 -> 6 migration repeats schemas/audit.sql's policies table.
  TempDir dir;
  ASSERT_NO_FATAL_FAILURE(expectMigrationCreatesWhatANewDatabaseHas(
      dir, testing::kUndoVersion7 + "PRAGMA user_version = 5",
      {"policies", "sqlite_autoindex_policies_1", "checkpoints"},
      "type || ':' || coalesce(sql, '')"));
  testing::expectChainIntact(dir / "migrated.db");
}

// Version 7 appends the policy stamp (policy_generation, shadow_decision, shadow_rule) to
// connections, requests and dns_queries. A version-6 database gains the same columns as a new
// one, its rows keep their hashes (all three NULL are not hashed), rows written afterwards carry
// stamps, and a stamp edited in, out or across breaks the row's hash.
TEST(SchemaTest, VersionSevenStampsRowsWithoutRehashingOldOnes) {
  TempDir dir;
  auto fresh = dir / "fresh.db";
  auto db = dir / "audit.db";
  ASSERT_NO_FATAL_FAILURE(populateNewAndOld(dir, testing::kUndoVersion7, 6));
  {
    auto store = testing::openStore(db);
    ASSERT_TRUE(store);
    ConnectionEvent c = testing::sampleConnection(80, "exec-3");
    c.stamp = {2, Verdict::kDeny, ""};
    store->recordConnection(c);
    RequestEvent r = testing::sampleRequest(80, "exec-3");
    r.stamp = {2, Verdict::kAllow, "stats-api"};
    store->recordRequest(r);
    DnsEvent d = testing::sampleDns(80, "exec-3");
    d.stamp.policy_generation = 3;
    store->recordDns(d);
    ASSERT_TRUE(store->recordExecution(testing::sampleExecution("exec-3")).has_value());
  }
  RawDb raw(db);
  EXPECT_EQ(raw.integer("PRAGMA user_version"), kSchemaVersion);
  for (std::string t : {"connections", "requests", "dns_queries"}) {
    const std::string sql =
        "SELECT group_concat(name || ' ' || type, ', ') FROM pragma_table_info('" + t + "')";
    EXPECT_EQ(raw.text(sql), RawDb(fresh).text(sql)) << t;
  }
  EXPECT_EQ(raw.text("SELECT policy_generation || ' ' || shadow_decision || ' ' || "
                     "coalesce(shadow_rule, '-') FROM connections WHERE execution_id = 'exec-3'"),
            "2 deny -");
  EXPECT_EQ(raw.text("SELECT shadow_rule FROM requests WHERE execution_id = 'exec-3'"),
            "stats-api");
  EXPECT_EQ(raw.integer("SELECT count(*) FROM connections WHERE policy_generation IS NULL"), 10);
  testing::expectChainIntact(db);

  for (const std::string edit :
       {"UPDATE connections SET policy_generation = 1 WHERE execution_id = 'exec-1'",
        "UPDATE connections SET shadow_decision = NULL WHERE execution_id = 'exec-3'",
        "UPDATE requests SET shadow_decision = 'deny' WHERE execution_id = 'exec-3'",
        "UPDATE dns_queries SET policy_generation = NULL"}) {
    std::filesystem::copy_file(db, dir / "edited.db",
                               std::filesystem::copy_options::overwrite_existing);
    ASSERT_EQ(RawDb(dir / "edited.db").exec(edit), "") << edit;
    auto v = verify(dir / "edited.db");
    ASSERT_TRUE(v.has_value());
    EXPECT_FALSE(v->ok) << edit;
  }
}

// Version 8 drops the index on requests (connection_id). A version-7 database ends with the
// same indexes as a new one, and its rows keep their hashes (an index is not in the chain).
TEST(SchemaTest, VersionEightDropsTheRequestsConnectionIndex) {
  TempDir dir;
  auto db = dir / "audit.db";
  ASSERT_NO_FATAL_FAILURE(populateNewAndOld(dir, testing::kUndoVersion8, 7));
  ASSERT_EQ(RawDb(db).integer("SELECT count(*) FROM sqlite_master WHERE name = "
                              "'requests_connection'"),
            1);
  { ASSERT_TRUE(testing::openStore(db)); }
  expectIndexesOfANewDatabase(dir);
  RawDb raw(db);
  EXPECT_EQ(raw.text(kIndexes).find("requests_connection"), std::string::npos);
  testing::expectChainIntact(db);
}

// Version 9 keeps only the rows that have a caller in executions_caller: a receipt without one
// (`sluice run`) writes no leaf of it, and a lookup by caller still uses it. A version-8
// database ends with the same indexes as a new one, its rows keep their hashes.
TEST(SchemaTest, VersionNineIndexesOnlyExecutionsThatHaveACaller) {
  TempDir dir;
  auto db = dir / "audit.db";
  ASSERT_NO_FATAL_FAILURE(populateNewAndOld(dir, testing::kUndoVersion9, 8));
  {
    auto store = testing::openStore(db);
    ASSERT_TRUE(store);
    auto e = testing::sampleExecution("exec-served");
    e.receipt_json = R"({"execution_id":"exec-served","caller":"uid:1000"})";
    ASSERT_TRUE(store->recordExecution(e).has_value());
  }
  expectIndexesOfANewDatabase(dir);
  RawDb raw(db);
  EXPECT_GT(raw.integer("SELECT count(*) FROM executions WHERE caller IS NULL"), 0);
  // The index's entries: only the execution with a caller.
  EXPECT_EQ(raw.integer("SELECT count(*) FROM executions INDEXED BY executions_caller "
                        "WHERE caller IS NOT NULL"),
            1);
  const std::string plan = queryPlan(raw, "SELECT id FROM executions WHERE caller = ?1");
  EXPECT_NE(plan.find("USING INDEX executions_caller"), std::string::npos) << plan;
  EXPECT_EQ(raw.text("SELECT id FROM executions WHERE caller = 'uid:1000'"), "exec-served");
  testing::expectChainIntact(db);
}

// Version 10 keeps only the rows of an execution in the five execution_id indexes: a
// standalone proxy's rows (no execution) add no entry, and an execution's rows are still found
// through them (=, IN, a join). A version-9 database ends with the same indexes as a new one,
// its rows keep their hashes.
TEST(SchemaTest, VersionTenIndexesOnlyRowsOfAnExecution) {
  TempDir dir;
  auto db = dir / "audit.db";
  ASSERT_NO_FATAL_FAILURE(populateNewAndOld(dir, testing::kUndoVersion10, 9));
  {
    auto store = testing::openStore(db);
    ASSERT_TRUE(store);
    // What a standalone `sluice proxy` writes: no execution.
    store->recordConnection(testing::sampleConnection(90, ""));
    store->recordForward(testing::sampleForward(90, ""));
    store->recordRequest(testing::sampleRequest(90, ""));
    store->recordDns(testing::sampleDns(90, ""));
    store->recordApproval(testing::sampleApproval(90, ""));
    ASSERT_TRUE(store->flush().has_value());
  }
  expectIndexesOfANewDatabase(dir);
  RawDb raw(db);
  for (const std::string t : testing::kExecutionIndexed) {
    SCOPED_TRACE(t);
    EXPECT_GT(raw.integer("SELECT count(*) FROM " + t + " WHERE execution_id IS NULL"), 0);
    // The index holds the rows of an execution only: it cannot serve a lookup of the others.
    EXPECT_EQ(raw.text("SELECT sql FROM sqlite_master WHERE name = '" + t + "_execution'"),
              "CREATE INDEX " + t + "_execution ON " + t +
                  " (execution_id) WHERE execution_id IS NOT NULL");
    const std::string nulls = queryPlan(raw, "SELECT * FROM " + t + " WHERE execution_id IS NULL");
    EXPECT_EQ(nulls.find("_execution"), std::string::npos) << nulls;
    for (const std::string where : {"execution_id = ?1", "execution_id IN ('exec-1', 'exec-2')"}) {
      const std::string plan = queryPlan(raw, "SELECT seq FROM " + t + " WHERE " + where);
      EXPECT_NE(plan.find("INDEX " + t + "_execution (execution_id=?)"), std::string::npos)
          << where << ": " << plan;
    }
  }
  // An execution's rows counted through a join on its id, as its receipt's summary does.
  const std::string plan =
      queryPlan(raw,
                "SELECT e.id, (SELECT count(*) FROM requests r WHERE r.execution_id = e.id) "
                "FROM executions e");
  EXPECT_NE(plan.find("INDEX requests_execution (execution_id=?)"), std::string::npos) << plan;
  EXPECT_EQ(raw.integer("SELECT count(*) FROM requests WHERE execution_id = 'exec-1'"), 5);
  testing::expectChainIntact(db);
}

TEST(SchemaTest, DeletedApprovalIsNamed) {
  TempDir dir;
  auto db = dir / "audit.db";
  {
    auto store = testing::openStore(db);
    ASSERT_TRUE(store);
    store->recordConnection(testing::sampleConnection(1));
    store->recordApproval(testing::sampleApproval(0));
    store->recordConnection(testing::sampleConnection(2));
    ASSERT_TRUE(store->flush().has_value());
  }
  testing::expectChainIntact(db);
  RawDb(db).exec("DELETE FROM approvals");
  auto v = verify(db);
  ASSERT_TRUE(v.has_value());
  EXPECT_FALSE(v->ok);
  EXPECT_NE(v->first_broken.find("rows 2..2 are missing"), std::string::npos) << v->first_broken;
}

TEST(SchemaTest, NewerVersionIsRefusedAndLeftAlone) {
  TempDir dir;
  auto db = dir / "audit.db";
  { ASSERT_TRUE(testing::openStore(db)); }
  { RawDb(db).exec("PRAGMA user_version = 99"); }
  auto s = Store::open(db);
  ASSERT_FALSE(s.has_value());
  EXPECT_NE(s.error().message.find(db.string()), std::string::npos) << s.error().message;
  EXPECT_NE(s.error().message.find("newer"), std::string::npos) << s.error().message;
  EXPECT_EQ(RawDb(db).integer("PRAGMA user_version"), 99);
  auto v = verify(db);
  ASSERT_FALSE(v.has_value());
  EXPECT_NE(v.error().message.find("newer"), std::string::npos);
}

TEST(SchemaTest, ForeignDatabaseIsRefusedAndNotRewritten) {
  TempDir dir;
  auto db = dir / "other.db";
  {
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open(db.c_str(), &raw), SQLITE_OK);
    sqlite3_exec(raw, "CREATE TABLE notes (x TEXT); INSERT INTO notes VALUES ('mine');", nullptr,
                 nullptr, nullptr);
    sqlite3_close(raw);
  }
  auto s = Store::open(db);
  ASSERT_FALSE(s.has_value());
  EXPECT_NE(s.error().message.find("not a sluice audit database"), std::string::npos)
      << s.error().message;
  EXPECT_NE(s.error().message.find(db.string()), std::string::npos);
  RawDb raw(db);
  EXPECT_EQ(raw.text("PRAGMA journal_mode"), "delete");  // not switched to WAL
  EXPECT_EQ(raw.integer("SELECT count(*) FROM sqlite_master"), 1);
  EXPECT_EQ(raw.integer("PRAGMA user_version"), 0);
}

TEST(SchemaTest, ForeignApplicationIdIsRefused) {
  TempDir dir;
  auto db = dir / "other.db";
  {
    sqlite3* raw = nullptr;
    sqlite3_open(db.c_str(), &raw);
    sqlite3_exec(raw, "PRAGMA application_id = 42; PRAGMA user_version = 1;", nullptr, nullptr,
                 nullptr);
    sqlite3_close(raw);
  }
  auto s = Store::open(db);
  ASSERT_FALSE(s.has_value());
  EXPECT_NE(s.error().message.find("not a sluice audit database"), std::string::npos)
      << s.error().message;
}

}  // namespace
}  // namespace sluice::audit
