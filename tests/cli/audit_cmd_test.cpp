// `sluice audit query|verify|sql|show` run as a user would: the real binary, exit codes,
// output formats.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "audit_test_util.hpp"

namespace sluice::audit {
namespace {

using testing::RawDb;
using testing::TempDir;

using testing::CliResult;
using testing::runCli;
using testing::slurp;

class AuditCmdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = testing::openStore(db_);
    ASSERT_TRUE(store);
    auto c = testing::sampleConnection(1, "exec-1", audit::Decision::kDeny);
    c.detail = "rule pypi matched the host, but port 8443 is not in [443], \"quoted\"\nnext";
    c.port = 8443;
    store->recordConnection(c);
    store->recordConnection(testing::sampleConnection(2, "exec-1"));
    store->recordRequest(testing::sampleRequest(2, "exec-1"));
    ASSERT_TRUE(store->recordExecution(testing::sampleExecution("exec-1")).has_value());
  }
  TempDir dir_;
  std::filesystem::path db_ = dir_ / "audit.db";
  std::string db() const { return db_.string(); }
};

TEST_F(AuditCmdTest, VerifyIntactExitsZeroWithCount) {
  auto r = runCli(dir_, {"audit", "verify", "--db", db()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("4 rows"), std::string::npos) << r.out;
}

TEST_F(AuditCmdTest, VerifyTamperedExitsOneNamingTheRow) {
  RawDb(db_).exec("UPDATE connections SET decision = 'allow' WHERE seq = 1");
  auto r = runCli(dir_, {"audit", "verify", "--db", db()});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("connections seq 1 (id c-exec-1-1)"), std::string::npos) << r.out;
}

TEST_F(AuditCmdTest, MissingDatabaseExitsTwoAndIsNotCreated) {
  auto missing = (dir_ / "missing.db").string();
  for (std::vector<std::string> args :
       {std::vector<std::string>{"audit", "verify", "--db", missing},
        {"audit", "query", "--db", missing},
        {"audit", "sql", "--db", missing, "SELECT 1"},
        {"audit", "show", "--db", missing, "exec-1"}}) {
    auto r = runCli(dir_, args);
    EXPECT_EQ(r.exit_code, 2) << args[1];
    EXPECT_NE(r.err.find(missing), std::string::npos) << r.err;
  }
  EXPECT_FALSE(std::filesystem::exists(missing));
}

TEST_F(AuditCmdTest, QueryCsvIsRfc4180) {
  auto r =
      runCli(dir_, {"audit", "query", "--db", db(), "--kind", "connections", "--format", "csv"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.substr(0, r.out.find("\r\n")),
            "seq,id,execution_id,workflow,ts,kind,host,port,resolved_ip,decision,rule_id,reason,"
            "detail,tls,bytes_up,bytes_down,duration_ms,policy_generation,shadow_decision,"
            "shadow_rule");
  EXPECT_NE(r.out.find(",\"rule pypi matched the host, but port 8443 is not in [443], "
                       "\"\"quoted\"\"\nnext\","),
            std::string::npos)
      << r.out;
  // Two data rows, each ending in CRLF (the embedded LF is inside quotes).
  std::size_t crlf = 0;
  for (std::size_t p = 0; (p = r.out.find("\r\n", p)) != std::string::npos; p += 2) ++crlf;
  EXPECT_EQ(crlf, 3u);
}

TEST_F(AuditCmdTest, QueryJsonIsOneDocument) {
  auto r = runCli(dir_, {"audit", "query", "--db", db(), "--decision", "deny", "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.is_array());
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["decision"], "deny");
  EXPECT_EQ(j[0]["port"], 8443);
}

// `--kind dns`: the queries of sluice's DNS, filtered like the other kinds (--host = name).
TEST_F(AuditCmdTest, QueryKindDns) {
  {
    auto store = testing::openStore(db_);
    ASSERT_TRUE(store);
    store->recordDns(testing::sampleDns(1, "exec-2"));
    store->recordDns(testing::sampleDns(2, "exec-2", audit::Decision::kDeny));
  }
  auto r = runCli(dir_, {"audit", "query", "--db", db(), "--kind", "dns", "--decision", "deny",
                         "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.is_array());
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["name"], "q2.example");
  EXPECT_EQ(j[0]["answer"], "NXDOMAIN");
  EXPECT_EQ(j[0]["execution_id"], "exec-2");
  auto v = runCli(dir_, {"audit", "verify", "--db", db()});
  EXPECT_EQ(v.exit_code, 0) << v.out << v.err;
}

TEST_F(AuditCmdTest, QueryTableListsExecutions) {
  auto r = runCli(dir_, {"audit", "query", "--db", db(), "--workflow", "data-analysis", "--since",
                         "2025-11-01T00:00:00Z", "--limit", "10"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("id ", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("exec-1"), std::string::npos) << r.out;
  auto none = runCli(dir_, {"audit", "query", "--db", db(), "--since", "1h"});
  ASSERT_EQ(none.exit_code, 0) << none.err;
  EXPECT_EQ(none.out.find("exec-1"), std::string::npos) << none.out;
}

TEST_F(AuditCmdTest, QueryBadTimeExitsTwo) {
  auto r = runCli(dir_, {"audit", "query", "--db", db(), "--since", "last tuesday"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("RFC 3339"), std::string::npos) << r.err;
}

TEST_F(AuditCmdTest, SqlIsReadOnly) {
  auto ok = runCli(dir_, {"audit", "sql", "--db", db(), "--format", "json",
                          "SELECT count(*) AS n FROM connections"});
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_EQ(nlohmann::json::parse(ok.out), nlohmann::json::parse(R"([{"n":2}])"));
  for (std::string bad : {"DELETE FROM connections", "PRAGMA journal_mode=DELETE",
                          "ATTACH DATABASE '/tmp/x.db' AS x"}) {
    auto r = runCli(dir_, {"audit", "sql", "--db", db(), bad});
    EXPECT_EQ(r.exit_code, 2) << bad;
    EXPECT_NE(r.err.find(db()), std::string::npos) << r.err;
  }
  EXPECT_EQ(RawDb(db_).integer("SELECT count(*) FROM connections"), 2);
}

TEST_F(AuditCmdTest, ShowPrintsReceiptAndTraffic) {
  auto r = runCli(dir_, {"audit", "show", "--db", db(), "--format", "json", "exec-1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["receipt"]["execution_id"], "exec-1");
  EXPECT_EQ(j["connections"].size(), 2u);
  EXPECT_EQ(j["requests"].size(), 1u);
  EXPECT_EQ(j["requests"][0]["injected_secrets"], nlohmann::json::array({"stats_token"}));
  auto text = runCli(dir_, {"audit", "show", "--db", db(), "exec-1"});
  EXPECT_EQ(text.exit_code, 0);
  EXPECT_NE(text.out.find("Connections (2)"), std::string::npos) << text.out;
  auto missing = runCli(dir_, {"audit", "show", "--db", db(), "nope"});
  EXPECT_EQ(missing.exit_code, 1);
}

}  // namespace
}  // namespace sluice::audit
