// Read-only access: filtered queries, show, and the read-only SQL guard.
#include "sluice/audit/reader.hpp"

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "audit_test_util.hpp"
#include "sluice/audit/event_text.hpp"

namespace sluice::audit {
namespace {

using testing::RawDb;
using testing::TempDir;

class ReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::populate(db_);
    auto r = Reader::open(db_);
    ASSERT_TRUE(r.has_value()) << r.error().message;
    reader_ = std::move(*r);
  }
  std::size_t column(const ResultTable& t, const std::string& name) {
    for (std::size_t i = 0; i < t.columns.size(); ++i) {
      if (t.columns[i] == name) return i;
    }
    ADD_FAILURE() << "no column " << name;
    return 0;
  }
  void expectRefused(const std::string& sql) {
    auto r = reader_->sql(sql);
    ASSERT_FALSE(r.has_value()) << sql << " was allowed";
    EXPECT_NE(r.error().message.find(db_.string()), std::string::npos) << r.error().message;
  }

  TempDir dir_;
  std::filesystem::path db_ = dir_ / "audit.db";
  std::unique_ptr<Reader> reader_;
};

TEST_F(ReaderTest, SqlSelects) {
  auto r = reader_->sql(
      "SELECT decision, count(*) AS n FROM connections GROUP BY decision "
      "ORDER BY decision");
  ASSERT_TRUE(r.has_value()) << r.error().message;
  ASSERT_EQ(r->columns, (std::vector<std::string>{"decision", "n"}));
  ASSERT_EQ(r->rows.size(), 2u);
  EXPECT_EQ(std::get<std::string>(r->rows[0][0]), "allow");
  EXPECT_EQ(std::get<std::int64_t>(r->rows[0][1]), 8);
  EXPECT_EQ(std::get<std::int64_t>(r->rows[1][1]), 2);
}

TEST_F(ReaderTest, SqlAllowsReadPragmas) {
  EXPECT_TRUE(reader_->sql("PRAGMA user_version").has_value());
  EXPECT_TRUE(reader_->sql("PRAGMA table_info(connections)").has_value());
  EXPECT_TRUE(reader_->sql("SELECT name FROM pragma_table_info('requests')").has_value());
}

TEST_F(ReaderTest, SqlAllowsJsonTableFunctions) {
  auto r = reader_->sql(
      "SELECT s.value AS secret, count(*) AS n FROM requests r, "
      "json_each(r.injected_secrets) s GROUP BY secret");
  ASSERT_TRUE(r.has_value()) << r.error().message;
  ASSERT_EQ(r->rows.size(), 1u);
  EXPECT_EQ(std::get<std::string>(r->rows[0][0]), "stats_token");
  EXPECT_EQ(std::get<std::int64_t>(r->rows[0][1]), 10);
}

TEST_F(ReaderTest, SqlRefusesWritesAttachAndStateChangingPragmas) {
  expectRefused("DELETE FROM connections");
  expectRefused("UPDATE connections SET host = 'x'");
  expectRefused("INSERT INTO policies VALUES ('a','b','c',1)");
  expectRefused("DROP TABLE requests");
  expectRefused("CREATE TABLE t (x)");
  expectRefused("CREATE TEMP TABLE t (x)");
  expectRefused("ATTACH DATABASE '" + (dir_ / "other.db").string() + "' AS o");
  expectRefused("PRAGMA journal_mode = DELETE");
  expectRefused("PRAGMA user_version = 7");
  expectRefused("PRAGMA query_only = 0");
  expectRefused("PRAGMA writable_schema = 1");
  expectRefused("VACUUM");
  expectRefused("BEGIN");
  expectRefused("SELECT 1; DELETE FROM connections");
  expectRefused("WITH x AS (SELECT 1) DELETE FROM connections");
  expectRefused("SELECT load_extension('/tmp/evil.so')");
  expectRefused("UPDATE sqlite_master SET sql = 'x'");
  expectRefused("PRAGMA writable_schema");
  RawDb raw(db_);
  EXPECT_EQ(raw.integer("SELECT count(*) FROM connections"), 10);
  EXPECT_EQ(raw.integer("PRAGMA user_version"), kSchemaVersion);
  EXPECT_EQ(raw.text("PRAGMA journal_mode"), "wal");
  EXPECT_FALSE(std::filesystem::exists(dir_ / "other.db"));
}

TEST_F(ReaderTest, MissingDatabaseIsAnErrorAndNotCreated) {
  auto missing = dir_ / "missing.db";
  auto r = Reader::open(missing);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find(missing.string()), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(missing));
}

TEST_F(ReaderTest, QueryExecutionsWithConnectionSummaries) {
  auto r = reader_->query({});
  ASSERT_TRUE(r.has_value()) << r.error().message;
  ASSERT_EQ(r->rows.size(), 2u);
  EXPECT_EQ(std::get<std::string>(r->rows[0][column(*r, "id")]), "exec-1");
  // Attempts, as receipts count them (docs/audit.md "What is counted"): the 5 requests and the
  // 4 allowed passthrough connections (the samples are passthrough rows), the 1 denied one.
  EXPECT_EQ(std::get<std::int64_t>(r->rows[0][column(*r, "allowed")]), 9);
  EXPECT_EQ(std::get<std::int64_t>(r->rows[0][column(*r, "denied")]), 1);
  EXPECT_EQ(std::get<std::int64_t>(r->rows[0][column(*r, "failed")]), 0);
  EXPECT_EQ(std::get<std::string>(r->rows[0][column(*r, "started_at")]),
            "2025-11-21T04:40:00.000Z");
  EXPECT_EQ(std::get<std::string>(r->rows[0][column(*r, "hosts")]),
            "files.pythonhosted.org:443 pypi.org:443");
}

TEST_F(ReaderTest, QueryExecutionsThatReachedAHost) {
  QueryFilter f;
  f.kind = "executions";
  f.host = "files.pythonhosted.org";
  f.decision = "allow";
  auto r = reader_->query(f);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(r->rows.size(), 2u);
  f.host = "pypi.org";
  f.decision = "deny";  // pypi.org (odd i) was never denied in populate()
  r = reader_->query(f);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(r->rows.size(), 0u);
}

TEST_F(ReaderTest, QueryDenialsGivesEvents) {
  QueryFilter f;
  f.decision = "deny";
  auto r = reader_->query(f);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  ASSERT_EQ(r->rows.size(), 2u);
  for (const auto& row : r->rows) {
    EXPECT_EQ(std::get<std::string>(row[column(*r, "decision")]), "deny");
    EXPECT_EQ(std::get<std::string>(row[column(*r, "type")]), "connection");
  }
}

TEST_F(ReaderTest, QueryFiltersCombine) {
  QueryFilter f;
  f.kind = "connections";
  f.execution = "exec-2";
  f.host = "pypi.org";
  auto r = reader_->query(f);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(r->rows.size(), 2u);  // i = 1, 3
  f.limit = 1;
  EXPECT_EQ(reader_->query(f)->rows.size(), 1u);
  f = {};
  f.kind = "requests";
  f.since_ms = 1'763'700'000'003;
  f.until_ms = 1'763'700'000'004;
  r = reader_->query(f);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->rows.size(), 2u);  // one per execution
  f = {};
  f.workflow = "no-such-workflow";
  EXPECT_EQ(reader_->query(f)->rows.size(), 0u);
}

// `audit query --kind dns`: one row per query of sluice's DNS; --host is the queried name.
TEST(ReaderDnsTest, QueryKindDns) {
  TempDir dir;
  auto db = dir / "audit.db";
  {
    auto store = testing::openStore(db);
    ASSERT_TRUE(store);
    store->recordDns(testing::sampleDns(1, "exec-1"));
    store->recordDns(testing::sampleDns(2, "exec-1", Decision::kDeny));
    store->recordDns(testing::sampleDns(3, "exec-2", Decision::kDeny));
    ASSERT_TRUE(store->recordExecution(testing::sampleExecution("exec-1")).has_value());
  }
  auto reader = Reader::open(db);
  ASSERT_TRUE(reader.has_value()) << reader.error().message;
  QueryFilter f;
  f.kind = "dns";
  auto all = (*reader)->query(f);
  ASSERT_TRUE(all.has_value()) << all.error().message;
  ASSERT_EQ(all->rows.size(), 3u);
  EXPECT_EQ(all->columns,
            (std::vector<std::string>{"id", "execution_id", "workflow", "ts", "name", "qtype",
                                      "answer", "decision", "rule_id", "reason",
                                      "policy_generation", "shadow_decision", "shadow_rule"}));
  f.decision = "deny";
  f.execution = "exec-1";
  auto denied = (*reader)->query(f);
  ASSERT_TRUE(denied.has_value()) << denied.error().message;
  ASSERT_EQ(denied->rows.size(), 1u);
  EXPECT_EQ(std::get<std::string>(denied->rows[0][4]), "q2.example");
  EXPECT_EQ(std::get<std::string>(denied->rows[0][6]), "NXDOMAIN");
  f = {};
  f.kind = "dns";
  f.host = "q3.example";
  auto by_name = (*reader)->query(f);
  ASSERT_TRUE(by_name.has_value());
  EXPECT_EQ(by_name->rows.size(), 1u);
}

// `audit query --kind approvals`: decided approvals, NULL method/path for a tunnel, times as
// RFC 3339, filters by execution and decision; JSON and CSV carry the same columns.
TEST(ReaderApprovalsTest, QueryKindApprovals) {
  TempDir dir;
  auto db = dir / "audit.db";
  {
    auto store = testing::openStore(db);
    ASSERT_TRUE(store);
    store->recordApproval(testing::sampleApproval(0, "exec-1"));
    store->recordApproval(testing::sampleApproval(1, "exec-1"));
    store->recordApproval(testing::sampleApproval(2, "exec-2"));
    ASSERT_TRUE(store->flush().has_value());
  }
  auto reader = Reader::open(db);
  ASSERT_TRUE(reader.has_value()) << reader.error().message;
  QueryFilter f;
  f.kind = "approvals";
  auto all = (*reader)->query(f);
  ASSERT_TRUE(all.has_value()) << all.error().message;
  ASSERT_EQ(all->rows.size(), 3u);
  EXPECT_EQ(all->columns, (std::vector<std::string>{"seq", "id", "execution_id", "session_id",
                                                    "workflow", "caller", "rule_id", "host", "port",
                                                    "method", "path", "decision", "reason", "scope",
                                                    "decided_by", "asked_at", "decided_at"}));
  EXPECT_EQ(std::get<std::string>(all->rows[0][1]), "ap-exec-1-0");
  EXPECT_EQ(std::get<std::string>(all->rows[0][15]), formatTime(1'763'700'000'000));
  EXPECT_TRUE(std::holds_alternative<std::monostate>(all->rows[1][9]));  // tunnel: no method
  f.decision = "deny";
  auto denied = (*reader)->query(f);
  ASSERT_TRUE(denied.has_value()) << denied.error().message;
  ASSERT_EQ(denied->rows.size(), 1u);
  EXPECT_EQ(std::get<std::string>(denied->rows[0][12]), "approval_timeout");
  f = {};
  f.kind = "approvals";
  f.execution = "exec-2";
  auto by_exec = (*reader)->query(f);
  ASSERT_TRUE(by_exec.has_value());
  ASSERT_EQ(by_exec->rows.size(), 1u);
  auto json = nlohmann::json::parse(formatResult(*by_exec, OutputFormat::kJson));
  EXPECT_EQ(json[0]["decided_by"], "uid:1000");
  EXPECT_EQ(json[0]["port"], 443);
  auto csv = formatResult(*by_exec, OutputFormat::kCsv);
  EXPECT_EQ(csv.rfind("seq,id,execution_id,session_id,", 0), 0u) << csv;
  EXPECT_NE(csv.find("ap-exec-2-2"), std::string::npos);
}

TEST_F(ReaderTest, ShowReturnsReceiptConnectionsAndRequests) {
  auto d = reader_->show("exec-1");
  ASSERT_TRUE(d.has_value()) << d.error().message;
  ASSERT_TRUE(d->has_value());
  EXPECT_EQ((*d)->connections.rows.size(), 5u);
  EXPECT_EQ((*d)->requests.rows.size(), 5u);
  EXPECT_NE((*d)->receipt_json.find("\"execution_id\":\"exec-1\""), std::string::npos);
  auto none = reader_->show("nope");
  ASSERT_TRUE(none.has_value());
  EXPECT_FALSE(none->has_value());
}

}  // namespace

// `audit query`'s executions summary and audit::countsAsAttempt (which the proxy's receipt
// counters and /metrics use) are one rule written twice, in SQL and in C++: over every kind,
// decision and TLS handling of a connections row, with and without requests, they agree.
TEST(RowsCountTest, TheSqlSummaryAndCountsAsAttemptAgree) {
  TempDir dir;
  const auto db = dir / "audit.db";
  std::map<Decision, std::int64_t> expected;
  {
    auto store = testing::openStore(db);
    ASSERT_TRUE(store);
    int n = 0;
    for (auto kind : {ConnectionKind::kConnect, ConnectionKind::kHttp, ConnectionKind::kTransparent,
                      ConnectionKind::kBlocked})
      for (auto decision : {Decision::kAllow, Decision::kDeny, Decision::kFail})
        for (auto tls : {TlsHandling::kNone, TlsHandling::kPassthrough, TlsHandling::kInspect}) {
          ConnectionEvent c = testing::sampleConnection(n, "exec-1", decision);
          c.kind = kind;
          c.tls = tls;
          store->recordConnection(c);
          if (countsAsAttempt(kind, decision, tls)) ++expected[decision];
          if (n % 2 == 0) {  // a request on every other one, of each decision in turn
            RequestEvent r = testing::sampleRequest(n, "exec-1");
            r.decision = static_cast<Decision>(n / 2 % 3);
            store->recordRequest(r);
            ++expected[r.decision];
          }
          ++n;
        }
    ASSERT_TRUE(store->recordExecution(testing::sampleExecution("exec-1")).has_value());
    ASSERT_TRUE(store->flush().has_value());
  }
  auto reader = Reader::open(db);
  ASSERT_TRUE(reader.has_value()) << reader.error().message;
  auto r = (*reader)->query({});
  ASSERT_TRUE(r.has_value()) << r.error().message;
  ASSERT_EQ(r->rows.size(), 1u);
  auto col = [&](const std::string& name) {
    for (std::size_t i = 0; i < r->columns.size(); ++i)
      if (r->columns[i] == name) return std::get<std::int64_t>(r->rows[0][i]);
    ADD_FAILURE() << "no column " << name;
    return std::int64_t{-1};
  };
  EXPECT_EQ(col("allowed"), expected[Decision::kAllow]);
  EXPECT_EQ(col("denied"), expected[Decision::kDeny]);
  EXPECT_EQ(col("failed"), expected[Decision::kFail]);
  EXPECT_GT(expected[Decision::kFail], 0);
}

}  // namespace sluice::audit
