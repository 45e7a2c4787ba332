// `sluice audit ship` and `audit verify --db postgresql://...` against a real PostgreSQL: the
// throwaway cluster the ctest fixture starts (pg_cluster.sh, a Unix socket in SLUICE_PG_DIR),
// real SQLite stores written by audit::Store, the real CLI.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "audit_test_util.hpp"
#include "sluice_cli.hpp"

namespace sluice::audit {
namespace {

using sluice::testing::sluice;

std::string pgDir() { return SLUICE_PG_DIR; }

/// What a shell command prints, trailing newlines trimmed.
std::string capture(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  std::size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  pclose(p);
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

/// `psql -At -c SQL` on database `db`; its output, trimmed.
std::string psql(const std::string& db, const std::string& sql) {
  return capture("psql -X -q -At 'postgresql:///" + db + "?host=" + pgDir() +
                 "&user=postgres' -c \"" + sql + "\" 2>&1");
}

class AuditPgTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(pgDir() + "/.s.PGSQL.5432")) {
      SLUICE_SKIP_OR_FAIL("no PostgreSQL cluster at "
                          << pgDir() << " (Debian: postgresql; see pg_cluster.sh)");
    }
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    db_ = std::string("t_") + info->name();
    for (char& c : db_) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    psql("postgres", "DROP DATABASE IF EXISTS " + db_);
    ASSERT_EQ(psql("postgres", "CREATE DATABASE " + db_), "");
    keys_ = testing::generateKeys();
    ASSERT_TRUE(keys_.key);
    std::ofstream(tmp_ / "audit.pub") << keys_.key->publicKeyPem();
  }
  void TearDown() override {
    if (!db_.empty()) psql("postgres", "DROP DATABASE IF EXISTS " + db_ + " WITH (FORCE)");
  }

  std::string uri() const {
    return "'postgresql:///" + db_ + "?host=" + pgDir() + "&user=postgres";
  }
  std::string to() const { return uri() + "'"; }
  std::string verifyDb(const std::string& node) const { return uri() + "&node=" + node + "'"; }

  /// `rows` rounds of every event type (6 chained rows each, plus the policy once), signed with
  /// a checkpoint every 50 rows.
  void writeStore(const std::filesystem::path& db, int rounds, int first = 0) {
    StoreOptions o = keys_.options();
    o.checkpoint_rows = 50;
    auto store = testing::openStore(db, o);
    ASSERT_TRUE(store);
    testing::recordSamplePolicy(*store);
    for (int i = first; i < first + rounds; ++i) {
      const std::string exec = "exec-" + std::to_string(i);
      store->recordConnection(testing::sampleConnection(i, exec));
      store->recordRequest(testing::sampleRequest(i, exec));
      store->recordForward(testing::sampleForward(i, exec));
      store->recordDns(testing::sampleDns(i, exec));
      store->recordApproval(testing::sampleApproval(i, exec));
      ASSERT_TRUE(store->recordExecution(testing::sampleExecution(exec)).has_value());
    }
    ASSERT_TRUE(store->flush().has_value());
  }

  std::int64_t storeRows(const std::filesystem::path& db) {
    return std::stoll(testing::RawDb(db).text("SELECT seq FROM chain_head"));
  }

  std::string verifyNode(const std::string& node, int* status) {
    auto r = sluice("audit verify --db " + verifyDb(node) + " --pubkey " +
                    (tmp_ / "audit.pub").string());
    *status = r.status;
    return r.out;
  }

  /// Starts `sluice audit ship` (follow mode) as a child process.
  pid_t startShip(const std::filesystem::path& db, const std::string& node,
                  const std::string& extra = "") {
    const std::string cmd = std::string("exec ") + SLUICE_BINARY + " audit ship --db " +
                            db.string() + " --to " + to() + " --node " + node + " " + extra +
                            " >/dev/null 2>&1";
    pid_t pid = ::fork();
    if (pid == 0) {
      ::execl("/bin/sh", "sh", "-c", cmd.c_str(), nullptr);
      ::_exit(127);
    }
    return pid;
  }

  /// Polls the node's shipped position until `done` holds (or a generous deadline passes).
  template <typename Pred>
  std::int64_t waitPosition(const std::string& node, Pred done) {
    std::int64_t seq = -1;
    for (int i = 0; i < 1500; ++i) {
      const std::string s = psql(db_, "SELECT seq FROM ship_positions WHERE node = '" + node + "'");
      seq = s.empty() || !std::isdigit(static_cast<unsigned char>(s[0])) ? -1 : std::stoll(s);
      if (done(seq)) return seq;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return seq;
  }

  testing::TempDir tmp_;
  std::string db_;
  testing::TestKeys keys_;
};

TEST_F(AuditPgTest, ThreeNodesShipConcurrentlyAndEachVerifies) {
  const std::vector<std::string> nodes = {"node-a", "node-b", "node-c"};
  for (std::size_t i = 0; i < nodes.size(); ++i)
    writeStore(tmp_ / (nodes[i] + ".db"), 100 + static_cast<int>(i) * 20);
  std::vector<std::thread> ships;
  std::atomic<int> failures{0};
  for (const auto& n : nodes) {
    ships.emplace_back([&, n] {
      auto r = sluice("audit ship --once --batch 64 --db " + (tmp_ / (n + ".db")).string() +
                      " --to " + to() + " --node " + n);
      if (r.status != 0) {
        ADD_FAILURE() << r.out;
        ++failures;
      }
    });
  }
  for (auto& t : ships) t.join();
  ASSERT_EQ(failures, 0);
  for (const auto& n : nodes) {
    const auto rows = storeRows(tmp_ / (n + ".db"));
    int status = -1;
    const std::string out = verifyNode(n, &status);
    EXPECT_EQ(status, 0) << out;
    EXPECT_NE(out.find(std::to_string(rows) + " rows verified"), std::string::npos) << out;
    EXPECT_NE(out.find("signatures valid"), std::string::npos) << out;
    EXPECT_EQ(psql(db_, "SELECT count(*) FROM connections WHERE node = '" + n + "'"),
              testing::RawDb(tmp_ / (n + ".db")).text("SELECT count(*) FROM connections"));
  }
  // audit sql reads the central store, across nodes, and cannot write to it.
  auto sql = sluice("audit sql --format csv --db " + to() +
                    " \"SELECT node, count(*) AS n FROM executions GROUP BY node ORDER BY node\"");
  EXPECT_EQ(sql.status, 0) << sql.out;
  EXPECT_EQ(sql.out, "node,n\r\nnode-a,100\r\nnode-b,120\r\nnode-c,140\r\n");
  auto write = sluice("audit sql --db " + to() + " \"DELETE FROM executions\"");
  EXPECT_EQ(write.status, 2) << write.out;
  EXPECT_NE(write.out.find("read-only"), std::string::npos) << write.out;
  // Shipping again copies nothing and changes nothing.
  auto again = sluice("audit ship --once --db " + (tmp_ / "node-a.db").string() + " --to " + to() +
                      " --node node-a");
  EXPECT_EQ(again.status, 0) << again.out;
  EXPECT_NE(again.out.find("shipped 0 rows"), std::string::npos) << again.out;
}

TEST_F(AuditPgTest, ShipKilledMidBatchLosesAndDoublesNothing) {
  const auto db = tmp_ / "node.db";
  // Enough batches (about 100) that the ship cannot finish while the poll below, a psql
  // process each time, notices the first one on a loaded machine: it once did with 21.
  writeStore(db, 10000);
  const auto rows = storeRows(db);
  const pid_t pid = startShip(db, "n1", "--batch 97");
  // Killed once some batches are in and before the last: the one in flight is cut off.
  const auto at = waitPosition("n1", [&](std::int64_t s) { return s > 0; });
  ::kill(pid, SIGKILL);
  int st = 0;
  ::waitpid(pid, &st, 0);
  ASSERT_GT(at, 0);
  const std::int64_t kept = std::stoll(psql(db_, "SELECT seq FROM ship_positions"));
  EXPECT_LT(kept, rows) << "the ship finished before it was killed";
  // Exactly the rows of the committed batches are there, each once.
  int status = -1;
  std::string out = verifyNode("n1", &status);
  EXPECT_NE(out.find(std::to_string(kept) + " rows verified"), std::string::npos) << out;
  auto resumed =
      sluice("audit ship --once --batch 97 --db " + db.string() + " --to " + to() + " --node n1");
  ASSERT_EQ(resumed.status, 0) << resumed.out;
  EXPECT_NE(resumed.out.find("shipped " + std::to_string(rows - kept) + " rows"), std::string::npos)
      << resumed.out;
  out = verifyNode("n1", &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find(std::to_string(rows) + " rows verified"), std::string::npos) << out;
}

TEST_F(AuditPgTest, TamperedRowsInPostgresAreCaughtByVerify) {
  const auto db = tmp_ / "node.db";
  writeStore(db, 30);
  auto r = sluice("audit ship --once --db " + db.string() + " --to " + to() + " --node n1");
  ASSERT_EQ(r.status, 0) << r.out;
  int status = -1;
  std::string out = verifyNode("n1", &status);
  ASSERT_EQ(status, 0) << out;
  const std::string seq =
      psql(db_, "SELECT seq FROM connections WHERE node = 'n1' ORDER BY seq LIMIT 1 OFFSET 3");
  ASSERT_EQ(
      psql(db_, "UPDATE connections SET host = 'evil.example' WHERE node = 'n1' AND seq = " + seq),
      "");
  out = verifyNode("n1", &status);
  EXPECT_EQ(status, 1) << out;
  EXPECT_NE(out.find("connections seq " + seq), std::string::npos) << out;
  EXPECT_NE(out.find("hash does not match"), std::string::npos) << out;
  // The last row deleted (and the position left): the head names the loss.
  ASSERT_EQ(
      psql(db_, "UPDATE connections SET host = 'pypi.org' WHERE node = 'n1' AND seq = " + seq), "");
  verifyNode("n1", &status);
  ASSERT_EQ(status, 0);
  ASSERT_EQ(psql(db_,
                 "DELETE FROM executions WHERE node = 'n1' AND seq = (SELECT max(seq) FROM "
                 "executions WHERE node = 'n1')"),
            "");
  out = verifyNode("n1", &status);
  EXPECT_EQ(status, 1) << out;
  // Another node's rows are not this node's.
  verifyNode("nobody", &status);
  EXPECT_EQ(status, 1);
}

TEST_F(AuditPgTest, ShipOfAnotherStoreUnderTheSameNodeIsRefused) {
  const auto first = tmp_ / "first.db";
  writeStore(first, 30);
  auto r = sluice("audit ship --once --db " + first.string() + " --to " + to() + " --node n1");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto shipped = storeRows(first);
  // A longer store with other rows: its row shipped.seq + 1 does not link to the shipped head.
  const auto other = tmp_ / "other.db";
  writeStore(other, 40, 100);
  ASSERT_GT(storeRows(other), shipped);
  auto refused =
      sluice("audit ship --once --db " + other.string() + " --to " + to() + " --node n1");
  EXPECT_EQ(refused.status, 2) << refused.out;
  EXPECT_NE(refused.out.find("does not continue the chain shipped for this node"),
            std::string::npos)
      << refused.out;
  // Nothing of it was kept: the position and the node's chain are the first store's.
  EXPECT_EQ(psql(db_, "SELECT seq FROM ship_positions WHERE node = 'n1'"), std::to_string(shipped));
  EXPECT_EQ(psql(db_, "SELECT count(*) FROM executions WHERE node = 'n1'"), "30");
  int status = -1;
  const std::string out = verifyNode("n1", &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find(std::to_string(shipped) + " rows verified"), std::string::npos) << out;
}

TEST_F(AuditPgTest, FollowShipsRowsAppendedLater) {
  const auto db = tmp_ / "node.db";
  writeStore(db, 10);
  const auto first = storeRows(db);
  const pid_t pid = startShip(db, "n1", "--interval-ms 20");
  EXPECT_EQ(waitPosition("n1", [&](std::int64_t s) { return s == first; }), first);
  writeStore(db, 10, 10);
  const auto second = storeRows(db);
  ASSERT_GT(second, first);
  EXPECT_EQ(waitPosition("n1", [&](std::int64_t s) { return s == second; }), second);
  ::kill(pid, SIGTERM);
  int st = 0;
  ::waitpid(pid, &st, 0);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  int status = -1;
  const std::string out = verifyNode("n1", &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find(std::to_string(second) + " rows verified"), std::string::npos) << out;
}

/// A store with every kind of row and some variety to filter on: denied and failed
/// connections, shadow decisions that differ, DNS denials; node `tag` names its executions.
void writeVariedStore(const std::filesystem::path& db, int rounds, const std::string& tag) {
  auto store = testing::openStore(db);
  ASSERT_TRUE(store);
  testing::recordSamplePolicy(*store);
  for (int i = 0; i < rounds; ++i) {
    const std::string exec = "exec-" + std::to_string(i % 4);
    const Decision d = i % 3 == 2   ? Decision::kDeny
                       : i % 5 == 4 ? Decision::kFail
                                    : Decision::kAllow;
    ConnectionEvent c = testing::sampleConnection(i, exec, d);
    c.host = tag + (i % 2 ? ".pypi.org" : ".files.example");
    if (i % 4 == 1) c.stamp.shadow_decision = Verdict::kDeny;
    store->recordConnection(std::move(c));
    store->recordRequest(testing::sampleRequest(i, exec));
    if (i % 3 != 1) store->recordForward(testing::sampleForward(i, exec));
    store->recordDns(testing::sampleDns(i, exec, i % 2 ? Decision::kDeny : Decision::kAllow));
    store->recordApproval(testing::sampleApproval(i, exec));
    if (i + 4 >= rounds) {  // each execution once, after its rows
      ASSERT_TRUE(store->recordExecution(testing::sampleExecution(exec)).has_value());
    }
  }
  ASSERT_TRUE(store->flush().has_value());
}

TEST_F(AuditPgTest, QueryAndShowGiveTheSameRowsOnBothBackends) {
  // Two nodes with the same execution ids: a node filter that leaked would show the other's.
  const auto a = tmp_ / "a.db";
  const auto b = tmp_ / "b.db";
  writeVariedStore(a, 24, "a");
  writeVariedStore(b, 9, "b");
  for (const auto& [db, node] : {std::pair{a, "n-a"}, std::pair{b, "n-b"}}) {
    auto r = sluice("audit ship --once --db " + db.string() + " --to " + to() + " --node " + node);
    ASSERT_EQ(r.status, 0) << r.out;
  }
  const std::vector<std::string> queries = {
      "",
      "--kind executions --format table",
      "--kind executions --decision deny",
      "--kind executions --host a.pypi.org --workflow data-analysis",
      "--kind connections",
      "--kind connections --decision fail --limit 2",
      "--kind requests --execution exec-2",
      "--kind forwards",
      "--kind dns --decision deny --format csv",
      "--kind approvals --since 2025-11-21T04:40:00.003Z --until 2025-11-21T04:40:00.020Z",
      "--kind events --decision deny",
      "--host a.files.example",
      "--shadow-diff",
  };
  for (const auto& [db, node] : {std::pair{a, "n-a"}, std::pair{b, "n-b"}}) {
    for (const auto& q : queries) {
      const std::string f = q.find("--format") == std::string::npos ? " --format json" : "";
      auto lite = sluice("audit query --db " + db.string() + " " + q + f);
      auto pg = sluice("audit query --db " + verifyDb(node) + " " + q + f);
      ASSERT_EQ(lite.status, 0) << q << ": " << lite.out;
      EXPECT_EQ(pg.status, 0) << q << ": " << pg.out;
      EXPECT_EQ(pg.out, lite.out) << node << " " << q;
      if (std::string(node) == "n-a") {
        EXPECT_GT(lite.out.size(), 10u) << q << ": finds rows";
      }
    }
    for (const std::string format : {"json", "table"}) {
      auto lite = sluice("audit show --format " + format + " --db " + db.string() + " exec-3");
      auto pg = sluice("audit show --format " + format + " --db " + verifyDb(node) + " exec-3");
      ASSERT_EQ(lite.status, 0) << lite.out;
      EXPECT_EQ(pg.status, 0) << pg.out;
      EXPECT_EQ(pg.out, lite.out) << node << " show " << format;
    }
  }
  // Node b's rows only: its connections name b.* hosts, never node a's.
  auto conns = sluice("audit query --kind connections --format csv --db " + verifyDb("n-b"));
  EXPECT_EQ(conns.out.find("a.pypi.org"), std::string::npos) << conns.out;
  EXPECT_EQ(conns.out.find("a.files.example"), std::string::npos) << conns.out;
  auto none = sluice("audit show --db " + verifyDb("n-c") + " exec-3");
  EXPECT_EQ(none.status, 1) << none.out;
  EXPECT_NE(none.out.find("postgresql node n-c: no execution"), std::string::npos) << none.out;
  auto empty = sluice("audit query --kind connections --format json --db " + verifyDb("n-c"));
  EXPECT_EQ(empty.status, 0) << empty.out;
  EXPECT_EQ(empty.out, "[]\n");
}

TEST_F(AuditPgTest, BadUriOrUnreachableServerIsAClearErrorWithoutThePassword) {
  // Nothing listens in tmp_: the server is unreachable.
  auto down =
      sluice("audit query --db 'postgresql://alice:Pw-s3cret-9@/x?host=" + tmp_.path().string() +
             "&node=n1'");
  EXPECT_EQ(down.status, 2) << down.out;
  EXPECT_NE(down.out.find("postgresql: cannot connect"), std::string::npos) << down.out;
  EXPECT_EQ(down.out.find("Pw-s3cret-9"), std::string::npos) << down.out;
  // A password on a command line is readable by every local user: said once, never repeated.
  const std::string warning = "holds a password, which every local user can read";
  EXPECT_NE(down.out.find(warning), std::string::npos) << down.out;
  EXPECT_EQ(down.out.find(warning), down.out.rfind(warning)) << down.out;
  // A malformed URI: libpq quotes the bad token, here the password.
  auto bad =
      sluice("audit show --db 'postgresql://alice:Pw%zz-s3cret@/x?host=" + tmp_.path().string() +
             "&node=n1' exec-1");
  EXPECT_EQ(bad.status, 2) << bad.out;
  EXPECT_NE(bad.out.find("cannot connect"), std::string::npos) << bad.out;
  EXPECT_EQ(bad.out.find("s3cret"), std::string::npos) << bad.out;
  auto pw_param = sluice("audit query --db 'postgresql:///x?host=" + tmp_.path().string() +
                         "&password=Pw-s3cret-9&node=n1&port=notaport'");
  EXPECT_EQ(pw_param.status, 2) << pw_param.out;
  EXPECT_EQ(pw_param.out.find("Pw-s3cret-9"), std::string::npos) << pw_param.out;
  auto no_node = sluice("audit query --db " + to());
  EXPECT_EQ(no_node.status, 2) << no_node.out;
  EXPECT_NE(no_node.out.find("needs ?node=ID"), std::string::npos) << no_node.out;
  EXPECT_EQ(no_node.out.find(warning), std::string::npos) << no_node.out;
  EXPECT_NE(pw_param.out.find(warning), std::string::npos) << pw_param.out;
}

TEST_F(AuditPgTest, UriQuotedWholeByLibpqShowsNoSecret) {
  // libpq quotes the whole URI when the host is malformed ("[::1]x"). The query's '@' opens
  // no userinfo, and sslpassword= and password= are both secrets.
  auto r = sluice(
      "audit query --db 'postgresql://[::1]x/db?sslpassword=Key-s3cret-7&password=Pw@s3cret-9"
      "&node=n1'");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("[::1]x"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("s3cret"), std::string::npos) << r.out;
  // The same through audit ship --to (its own connection).
  auto ship = sluice("audit ship --once --node n1 --db " + (tmp_ / "none.db").string() +
                     " --to 'postgresql://alice:Pw-s3cret-9@[::1]x/db'");
  EXPECT_EQ(ship.status, 2) << ship.out;
  EXPECT_NE(ship.out.find("cannot connect"), std::string::npos) << ship.out;
  EXPECT_EQ(ship.out.find("s3cret"), std::string::npos) << ship.out;
  EXPECT_NE(ship.out.find("holds a password"), std::string::npos) << ship.out;
}

TEST_F(AuditPgTest, ProveGivesTheSameProofFromPostgres) {
  const auto db = tmp_ / "node.db";
  writeStore(db, 40);  // signed, a checkpoint every 50 rows and at close
  auto r = sluice("audit ship --once --db " + db.string() + " --to " + to() + " --node n1");
  ASSERT_EQ(r.status, 0) << r.out;
  for (const std::string exec : {"exec-3", "exec-39"}) {
    auto lite = sluice("audit prove --db " + db.string() + " --execution " + exec, "2>/dev/null");
    auto pg = sluice("audit prove --db " + verifyDb("n1") + " --execution " + exec, "2>/dev/null");
    ASSERT_EQ(lite.status, 0) << lite.out;
    EXPECT_EQ(pg.status, 0) << pg.out;
    EXPECT_EQ(pg.out, lite.out) << exec;
    std::ofstream(tmp_ / "proof.json") << pg.out;
    auto check = sluice("audit check-proof --pubkey " + (tmp_ / "audit.pub").string() + " " +
                        (tmp_ / "proof.json").string());
    EXPECT_EQ(check.status, 0) << check.out;
  }
  auto none = sluice("audit prove --db " + verifyDb("n1") + " --execution exec-nope");
  EXPECT_EQ(none.status, 2) << none.out;
  EXPECT_NE(none.out.find("postgresql node n1: no execution with id 'exec-nope'"),
            std::string::npos)
      << none.out;
  // A row hash changed in PostgreSQL: the tree no longer has the checkpoint's root.
  ASSERT_EQ(psql(db_,
                 "UPDATE connections SET hash = repeat('0', 64) WHERE node = 'n1' AND seq = "
                 "(SELECT min(seq) FROM connections WHERE node = 'n1')"),
            "");
  auto tampered = sluice("audit prove --db " + verifyDb("n1") + " --execution exec-3");
  EXPECT_EQ(tampered.status, 2) << tampered.out;
  EXPECT_NE(tampered.out.find("do not match checkpoint"), std::string::npos) << tampered.out;
}

TEST_F(AuditPgTest, ExportGivesTheSameLinesFromPostgres) {
  const auto db = tmp_ / "node.db";
  writeStore(db, 30);
  auto r = sluice("audit ship --once --db " + db.string() + " --to " + to() + " --node n1");
  ASSERT_EQ(r.status, 0) << r.out;
  writeStore(tmp_ / "other.db", 5);  // another node's rows must not show
  r = sluice("audit ship --once --db " + (tmp_ / "other.db").string() + " --to " + to() +
             " --node n2");
  ASSERT_EQ(r.status, 0) << r.out;
  for (const std::string opts : {"", "--format csv", "--after-seq 77", "--after-seq 100000",
                                 "--since 2025-11-21T04:40:00.010Z"}) {
    auto lite = sluice("audit export --db " + db.string() + " " + opts);
    auto pg = sluice("audit export --db " + verifyDb("n1") + " " + opts);
    ASSERT_EQ(lite.status, 0) << lite.out;
    EXPECT_EQ(pg.status, 0) << pg.out;
    EXPECT_EQ(pg.out, lite.out) << opts;
  }
  auto all = sluice("audit export --db " + verifyDb("n1"), "2>/dev/null");
  ASSERT_GT(all.out.size(), 1000u);
  std::ofstream(tmp_ / "export.jsonl") << all.out;
  auto check = sluice("audit verify-export --pubkey " + (tmp_ / "audit.pub").string() + " " +
                      (tmp_ / "export.jsonl").string());
  EXPECT_EQ(check.status, 0) << check.out;
}

TEST_F(AuditPgTest, ShipWithoutNodeUsesTheMachineIdElseTheHostName) {
  std::string machine_id;
  std::ifstream("/etc/machine-id") >> machine_id;
  // Derived from the machine id, which itself never leaves the machine.
  std::string expected;
  if (!machine_id.empty()) {
    const std::string& key = machine_id;
    expected = capture("printf %s 'sluice audit ship node' | openssl dgst -sha256 -hmac '" + key +
                       "' -r | cut -c1-32");
    EXPECT_EQ(expected.size(), 32u) << expected;
  }
  if (expected.empty()) {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    expected = host;
  }
  ASSERT_FALSE(expected.empty());
  const auto db = tmp_ / "node.db";
  writeStore(db, 5);
  auto r = sluice("audit ship --once --db " + db.string() + " --to " + to());
  ASSERT_EQ(r.status, 0) << r.out;
  const std::string said = "node id " + expected + " (from ";
  EXPECT_NE(r.out.find(said), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(said), r.out.rfind(said)) << "said once: " << r.out;
  if (!machine_id.empty()) {
    EXPECT_EQ(r.out.find(machine_id), std::string::npos) << "the machine id itself";
  }
  EXPECT_EQ(psql(db_, "SELECT node FROM ship_positions"), expected);
  int status = -1;
  const std::string out = verifyNode(expected, &status);
  EXPECT_EQ(status, 0) << out;
}

}  // namespace
}  // namespace sluice::audit
