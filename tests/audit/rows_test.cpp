// The row descriptions (audit/src/rows.cpp) against the live schema: every chained table of a
// new database has a description, and its stored columns are exactly the description's, in its
// order, so the INSERTs, hashes, verify and export derived from them cannot drift from it.
#include "rows.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "audit_test_util.hpp"
#include "sluice/base/json.hpp"

namespace sluice::audit {
namespace {

using testing::RawDb;
using testing::TempDir;

/// The stored columns of `table` in schema order (generated columns left out), without the
/// chain's own seq, prev_hash and hash.
std::vector<std::string> storedColumns(RawDb& raw, std::string_view table) {
  std::vector<std::string> out;
  sqlite3_stmt* s = nullptr;
  const std::string sql =
      "SELECT name, hidden FROM pragma_table_xinfo('" + std::string(table) + "')";
  EXPECT_EQ(sqlite3_prepare_v2(raw.get(), sql.c_str(), -1, &s, nullptr), SQLITE_OK);
  while (sqlite3_step(s) == SQLITE_ROW) {
    std::string name = reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
    // hidden: 0 a stored column, 2 or 3 a generated one (not part of a row's encoding).
    if (sqlite3_column_int(s, 1) != 0) continue;
    if (name == "seq" || name == "prev_hash" || name == "hash") continue;
    out.push_back(std::move(name));
  }
  sqlite3_finalize(s);
  return out;
}

/// The tables whose rows are in the hash chain: those with a prev_hash column.
std::set<std::string> chainedTablesInSchema(RawDb& raw) {
  std::set<std::string> out;
  sqlite3_stmt* s = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(raw.get(),
                               "SELECT m.name FROM sqlite_master m, pragma_table_info(m.name) c "
                               "WHERE m.type = 'table' AND c.name = 'prev_hash'",
                               -1, &s, nullptr),
            SQLITE_OK);
  while (sqlite3_step(s) == SQLITE_ROW)
    out.insert(reinterpret_cast<const char*>(sqlite3_column_text(s, 0)));
  sqlite3_finalize(s);
  return out;
}

void expectDescriptionsMatchSchema(const std::filesystem::path& db) {
  RawDb raw(db);
  std::set<std::string> described;
  for (const auto& t : detail::chainTables()) {
    described.insert(std::string(t.name));
    const std::vector<std::string> want(t.columns.begin(), t.columns.end());
    EXPECT_EQ(storedColumns(raw, t.name), want) << t.name << ": the schema's columns";
    // The derived INSERT prepares against the live schema.
    sqlite3_stmt* s = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(raw.get(), detail::insertSql(t).c_str(), -1, &s, nullptr),
              SQLITE_OK)
        << detail::insertSql(t) << ": " << sqlite3_errmsg(raw.get());
    sqlite3_finalize(s);
  }
  EXPECT_EQ(chainedTablesInSchema(raw), described) << "a chained table without a description";
}

TEST(RowsTest, DescriptionsMatchTheSchemaOfANewDatabase) {
  TempDir dir;
  testing::populate(dir / "audit.db");
  expectDescriptionsMatchSchema(dir / "audit.db");
}

TEST(RowsTest, DescriptionsMatchTheSchemaOfAMigratedDatabase) {
  TempDir dir;
  auto db = dir / "audit.db";
  testing::populate(db, 5, false);
  {
    // Back to version 5 (policies outside the chain); opening migrates it to the current one.
    RawDb raw(db);
    ASSERT_EQ(testing::addVersion5Policy(raw.get()), "");
    ASSERT_EQ(raw.exec(testing::kUndoVersion7 + "PRAGMA user_version = 5"), "");
  }
  ASSERT_TRUE(testing::openStore(db));
  expectDescriptionsMatchSchema(db);
}

TEST(RowsTest, InsertSqlListsTheDescribedColumnsInOrder) {
  const auto* t = detail::findChainTable("dns_queries");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(detail::insertSql(*t),
            "INSERT INTO dns_queries (seq, prev_hash, hash, execution_id, workflow, ts, name, "
            "qtype, answer, decision, rule_id, reason, policy_generation, shadow_decision, "
            "shadow_rule) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, "
            "?15)");
  EXPECT_EQ(detail::insertSql(*detail::findChainTable("policies")).rfind("INSERT OR IGNORE", 0),
            0u);
  EXPECT_EQ(detail::columnKind("injected_secrets"), detail::ColumnKind::kJson);
  EXPECT_EQ(detail::columnKind("asked_at"), detail::ColumnKind::kTime);
  EXPECT_EQ(detail::columnKind("duration_ms"), detail::ColumnKind::kPlain);
}

// Every enumerator of the events is stored as the text the schema documents (event_text.hpp,
// the one mapping): existing rows' hashes cover that text, so it must never change.
TEST(RowsTest, EnumColumnsStoreTheirText) {
  TempDir dir;
  {
    auto store = testing::openStore(dir / "audit.db");
    ASSERT_TRUE(store);
    const ConnectionKind kinds[] = {ConnectionKind::kConnect, ConnectionKind::kHttp,
                                    ConnectionKind::kTransparent, ConnectionKind::kBlocked};
    const TlsHandling tls[] = {TlsHandling::kNone, TlsHandling::kPassthrough, TlsHandling::kInspect,
                               TlsHandling::kNone};
    const ApprovalScope scopes[] = {ApprovalScope::kOnce, ApprovalScope::kExecution,
                                    ApprovalScope::kHost};
    for (int i = 0; i < 4; ++i) {
      auto c = testing::sampleConnection(i, "exec-1", i % 2 ? Decision::kDeny : Decision::kAllow);
      c.kind = kinds[i];
      c.tls = tls[i];
      store->recordConnection(c);
    }
    for (int i = 0; i < 3; ++i) {
      auto a = testing::sampleApproval(i);
      a.scope = scopes[i];
      store->recordApproval(a);
    }
    store->recordDns(testing::sampleDns(1, "exec-1", Decision::kDeny));
    auto r = testing::sampleRequest(1);
    r.decision = Decision::kDeny;
    store->recordRequest(r);
    ASSERT_TRUE(store->recordExecution(testing::sampleExecution("exec-1")).has_value());
  }
  RawDb raw(dir / "audit.db");
  EXPECT_EQ(raw.text("SELECT group_concat(kind || '/' || tls || '/' || decision, ' ') FROM "
                     "(SELECT * FROM connections ORDER BY seq)"),
            "connect/none/allow http/passthrough/deny transparent/inspect/allow blocked/none/deny");
  EXPECT_EQ(raw.text("SELECT group_concat(scope || '/' || decision, ' ') FROM "
                     "(SELECT * FROM approvals ORDER BY seq)"),
            "once/allow execution/deny host/allow");
  EXPECT_EQ(raw.text("SELECT decision FROM dns_queries"), "deny");
  EXPECT_EQ(raw.text("SELECT decision FROM requests"), "deny");
}

// The injected_secrets column's JSON is hashed into the chain as written: the direct writer of
// plain lists must give exactly the bytes nlohmann's dump gives, and anything else must still go
// through nlohmann (escapes, UTF-8 checked and replaced).
TEST(RowsTest, SecretListsAreTheJsonNlohmannWrites) {
  const std::vector<std::vector<std::string>> lists = {
      {},
      {"bench_token"},
      {"a", "b-2", "C.3_x"},
      {""},
      {"", ""},
      {" spaces and ~!@#$%^&*()[]{}<>?/|;:',.`=+ "},
      {"quote\"inside"},
      {"back\\slash"},
      {"tab\there", "nl\n"},
      {std::string("nul\0byte", 8)},
      {"del\x7f"},
      {"caf\xc3\xa9"},
      {"bad\xff\xfeutf8"},
      {"plain", "mixed\"one"},
  };
  for (const auto& list : lists) {
    std::string buffer = "left over";
    const std::string_view got = detail::jsonStringList(list, buffer);
    EXPECT_EQ(got, base::dumpJson(nlohmann::json(list))) << ::testing::PrintToString(list);
  }
}

}  // namespace
}  // namespace sluice::audit
