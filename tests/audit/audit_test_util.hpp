// Shared helpers of the audit tests: temp dirs, sample events, raw SQLite access (to inspect
// and tamper with databases behind the store's back), root-gated tmpfs mounts.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../runner/isolation_required.hpp"
#include "sluice/audit/signing.hpp"
#include "sluice/audit/store.hpp"

namespace sluice::audit::testing {

/// A fresh directory under /tmp, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/sluice-audit-test-XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

/// Tests needing root or mounts: skip normally, fail when CI demands isolation.
using ::isolationRequired;
#define SLUICE_SKIP_OR_FAIL(msg)                         \
  do {                                                   \
    if (::sluice::audit::testing::isolationRequired()) { \
      FAIL() << msg;                                     \
    } else {                                             \
      GTEST_SKIP() << msg;                               \
    }                                                    \
  } while (0)

/// A tmpfs of `size` mounted on a fresh directory; unmounted (lazily) and removed at scope end.
class TmpfsMount {
 public:
  explicit TmpfsMount(const std::string& options) {
    char tmpl[] = "/tmp/sluice-audit-tmpfs-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    mounted_ = ::mount("tmpfs", dir_.c_str(), "tmpfs", 0, options.c_str()) == 0;
  }
  ~TmpfsMount() {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
    ::rmdir(dir_.c_str());
  }
  bool mounted() const { return mounted_; }
  const std::filesystem::path& path() const { return dir_; }
  bool remountReadOnly() {
    return ::mount(nullptr, dir_.c_str(), nullptr, MS_REMOUNT | MS_RDONLY, nullptr) == 0;
  }

 private:
  std::filesystem::path dir_;
  bool mounted_ = false;
};

inline std::string sha256Hex(const std::string& data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned n = 0;
  EVP_Digest(data.data(), data.size(), md, &n, EVP_sha256(), nullptr);
  std::string out;
  for (unsigned i = 0; i < n; ++i) {
    static const char* kHex = "0123456789abcdef";
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 0xf];
  }
  return out;
}

inline const std::string kPolicyText =
    "apiVersion: sluice/v1\nkind: Workflow\nname: data-analysis\n";

inline ConnectionEvent sampleConnection(int n, const std::string& execution = "exec-1",
                                        Decision decision = Decision::kAllow) {
  ConnectionEvent c;
  c.id = "c-" + execution + "-" + std::to_string(n);
  c.execution_id = execution;
  c.workflow = "data-analysis";
  c.policy_sha256 = std::string(64, 'a');
  c.ts_ms = 1'763'700'000'000 + n;
  c.kind = ConnectionKind::kConnect;
  c.host = n % 2 ? "pypi.org" : "files.pythonhosted.org";
  c.port = 443;
  c.resolved_ip = "151.101.0.223";
  c.decision = decision;
  c.rule_id = decision == Decision::kAllow ? "pypi" : "";
  c.reason = decision == Decision::kAllow ? "allowed" : "default_deny";
  c.tls = TlsHandling::kPassthrough;
  c.bytes_up = 1000 + static_cast<std::uint64_t>(n);
  c.bytes_down = 20000;
  c.duration_ms = 12;
  return c;
}

inline RequestEvent sampleRequest(int n, const std::string& execution = "exec-1") {
  RequestEvent r;
  r.connection_id = "c-" + execution + "-" + std::to_string(n);
  r.execution_id = execution;
  r.workflow = "data-analysis";
  r.ts_ms = 1'763'700'000'000 + n;
  r.method = "GET";
  r.host = "stats.internal.example";
  r.path = "/v1/items";
  r.status = 200;
  r.decision = Decision::kAllow;
  r.rule_id = "stats-api";
  r.reason = "allowed";
  r.injected_secrets = {"stats_token"};
  return r;
}

/// The write-ahead row of sampleRequest(n) (same connection, execution, ts, method, host, path).
inline ForwardEvent sampleForward(int n, const std::string& execution = "exec-1") {
  return forwardOf(sampleRequest(n, execution));
}

/// One query of sluice's DNS: allowed (a synthetic address) or denied (NXDOMAIN).
inline DnsEvent sampleDns(int n, const std::string& execution = "exec-1",
                          Decision decision = Decision::kAllow) {
  DnsEvent d;
  d.execution_id = execution;
  d.workflow = "wf";
  d.ts_ms = 1700000000000 + n;
  d.name = "q" + std::to_string(n) + ".example";
  d.qtype = "A";
  d.decision = decision;
  d.answer = decision == Decision::kAllow ? "198.18.0." + std::to_string(n) : "NXDOMAIN";
  d.reason = decision == Decision::kAllow ? "allowed" : "no_matching_rule";
  return d;
}

/// One decided approval of an `ask` rule: a request (allowed once by uid 1000) or, for an odd n,
/// a tunnel (no method/path) denied by timeout.
inline ApprovalEvent sampleApproval(int n, const std::string& execution = "exec-1") {
  ApprovalEvent a;
  a.id = "ap-" + execution + "-" + std::to_string(n);
  a.execution_id = execution;
  a.session_id = n % 2 ? "" : "se-1";
  a.workflow = "data-analysis";
  a.caller = "uid:1000";
  a.rule_id = "ask-uploads";
  a.host = "uploads.example";
  a.port = 443;
  a.method = n % 2 ? "" : "POST";
  a.path = n % 2 ? "" : "/v1/upload";
  a.decision = n % 2 ? Decision::kDeny : Decision::kAllow;
  a.reason = n % 2 ? "approval_timeout" : "";
  a.scope = ApprovalScope::kOnce;
  a.decided_by = n % 2 ? "timeout" : "uid:1000";
  a.asked_at_ms = 1'763'700'000'000 + n;
  a.decided_at_ms = 1'763'700'002'000 + n;
  return a;
}

inline ExecutionRecord sampleExecution(const std::string& id) {
  ExecutionRecord e;
  e.id = id;
  e.workflow = "data-analysis";
  e.policy_sha256 = std::string(64, 'a');
  e.argv_json = R"j(["python3","-c","print(1)"])j";
  e.started_at_ms = 1'763'700'000'000;
  e.ended_at_ms = 1'763'700'000'250;
  e.exit_code = 0;
  e.signal = 0;
  e.usage_json = R"({"cpu_user_ms":10,"cpu_sys_ms":2,"max_rss_bytes":1048576,"pids_peak":1})";
  e.stdout_bytes = 2;
  e.stderr_bytes = 0;
  e.artifacts_json = "[]";
  e.receipt_json = R"({"execution_id":")" + id + R"(","workflow":"data-analysis"})";
  return e;
}

/// A fresh signing key and its public half (what `audit verify --key` reads). Both are null,
/// and the test has failed, when either cannot be made: callers ASSERT on them.
struct TestKeys {
  std::shared_ptr<const SigningKey> key;
  std::shared_ptr<const PublicKey> pub;
  /// Store options that sign with `key` (checkpoint spacing left to the caller).
  StoreOptions options() const {
    StoreOptions o;
    o.signing_key = key;
    return o;
  }
};

inline TestKeys generateKeys() {
  auto key = SigningKey::generate();
  EXPECT_TRUE(key.has_value()) << (key ? "" : key.error().message);
  if (!key) return {};
  auto pub = PublicKey::fromPem((*key)->publicKeyPem(), "test");
  EXPECT_TRUE(pub.has_value()) << (pub ? "" : pub.error().message);
  if (!pub) return {};
  return {*key, *pub};
}

/// A raw connection for inspecting or tampering with a database.
class RawDb {
 public:
  explicit RawDb(const std::filesystem::path& p) {
    if (sqlite3_open_v2(p.c_str(), &db_, SQLITE_OPEN_READWRITE, nullptr) != SQLITE_OK) {
      ADD_FAILURE() << "cannot open " << p << ": " << sqlite3_errmsg(db_);
    }
    sqlite3_busy_timeout(db_, 5000);
  }
  ~RawDb() { sqlite3_close_v2(db_); }
  RawDb(const RawDb&) = delete;
  RawDb& operator=(const RawDb&) = delete;

  /// Runs statements; returns "" or SQLite's error.
  std::string exec(const std::string& sql) {
    char* err = nullptr;
    int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err);
    std::string msg = rc == SQLITE_OK ? "" : (err ? err : "error");
    sqlite3_free(err);
    return msg;
  }
  /// First column of the first row as text ("" for NULL / no row).
  std::string text(const std::string& sql) {
    sqlite3_stmt* s = nullptr;
    std::string out;
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &s, nullptr) != SQLITE_OK) {
      ADD_FAILURE() << sql << ": " << sqlite3_errmsg(db_);
      return out;
    }
    if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_type(s, 0) != SQLITE_NULL) {
      out = reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
    }
    sqlite3_finalize(s);
    return out;
  }
  std::int64_t integer(const std::string& sql) {
    std::string t = text(sql);
    return t.empty() ? -1 : std::stoll(t);
  }
  sqlite3* get() const { return db_; }

 private:
  sqlite3* db_ = nullptr;
};

/// Opens a store or fails the test.
/// verify() reads the database and finds the chain intact (a failure names the broken row).
inline void expectChainIntact(const std::filesystem::path& db) {
  auto v = verify(db);
  ASSERT_TRUE(v.has_value()) << v.error().message;
  EXPECT_TRUE(v->ok) << v->first_broken;
}

inline std::unique_ptr<Store> openStore(const std::filesystem::path& p, StoreOptions o = {}) {
  auto s = Store::open(p, o);
  EXPECT_TRUE(s.has_value()) << (s ? "" : s.error().message);
  return s ? std::move(*s) : nullptr;
}

/// Records kPolicyText as the workflow "data-analysis" loaded it.
inline void recordSamplePolicy(Store& store) {
  store.recordPolicy(sha256Hex(kPolicyText), "data-analysis", kPolicyText);
}

/// A database with a mix of rows: 2 executions, their connections and requests (seq 1..22 with
/// the default 5), then (unless `policy` is false) a policy as the last row of the chain.
inline void populate(const std::filesystem::path& p, int connections_per_execution = 5,
                     bool policy = true) {
  auto store = openStore(p);
  ASSERT_TRUE(store);
  for (std::string exec : {"exec-1", "exec-2"}) {
    for (int i = 0; i < connections_per_execution; ++i) {
      store->recordConnection(
          sampleConnection(i, exec, i % 3 == 2 ? Decision::kDeny : Decision::kAllow));
      store->recordRequest(sampleRequest(i, exec));
    }
    ASSERT_TRUE(store->recordExecution(sampleExecution(exec)).has_value());
  }
  if (policy) {
    recordSamplePolicy(*store);
    ASSERT_TRUE(store->flush().has_value());
  }
}

/// The tables with an index on execution_id (`<table>_execution`).
inline constexpr std::array<const char*, 5> kExecutionIndexed = {
    "connections", "requests", "forwards", "dns_queries", "approvals"};

/// SQL that takes a current database back to version 9 (each execution_id index over every
/// row, NULLs included).
inline const std::string kUndoVersion10 = [] {
  std::string sql;
  for (const std::string t : kExecutionIndexed)
    sql += "DROP INDEX " + t + "_execution; CREATE INDEX " + t + "_execution ON " + t +
           " (execution_id); ";
  return sql;
}();

/// SQL that takes a current database back to version 8 (executions_caller over every row).
inline const std::string kUndoVersion9 =
    kUndoVersion10 +
    "DROP INDEX executions_caller; CREATE INDEX executions_caller ON executions (caller); ";

/// SQL that takes a current database back to version 7 (the index on requests (connection_id)
/// it had then).
inline const std::string kUndoVersion8 =
    kUndoVersion9 + "CREATE INDEX requests_connection ON requests (connection_id); ";

/// SQL that takes a current database's tables back to version 6 (before the policy stamp
/// columns, and version 8's index change): run first by a test that turns a database back
/// into an older version.
inline const std::string kUndoVersion7 = [] {
  std::string sql = kUndoVersion8;
  for (const char* t : {"connections", "requests", "dns_queries"})
    for (const char* c : {"policy_generation", "shadow_decision", "shadow_rule"})
      sql += std::string("ALTER TABLE ") + t + " DROP COLUMN " + c + "; ";
  return sql;
}();

/// Gives a database populate()d with `policy` false the version-5 `policies` table (not in the
/// chain), holding kPolicyText as a version-5 store did: what the 5 -> 6 migration starts from.
inline std::string addVersion5Policy(sqlite3* db, std::int64_t loaded_at = 1'763'700'000'000) {
  const std::string sql =
      "DROP TABLE policies; CREATE TABLE policies (sha256 TEXT PRIMARY KEY NOT NULL, workflow "
      "TEXT NOT NULL, yaml TEXT NOT NULL, loaded_at INTEGER NOT NULL) STRICT; INSERT INTO "
      "policies VALUES ('" +
      sha256Hex(kPolicyText) + "', 'data-analysis', '" + kPolicyText + "', " +
      std::to_string(loaded_at) + ")";
  char* err = nullptr;
  int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  std::string msg = rc == SQLITE_OK ? "" : (err ? err : "error");
  sqlite3_free(err);
  return msg;
}

/// The real `sluice` binary run as a user would, stdout and stderr captured in `dir`.
struct CliResult {
  int exit_code = -1;
  std::string out, err;
};

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

inline CliResult runCli(const TempDir& dir, std::vector<std::string> args) {
  auto out_path = dir / "cli.out";
  auto err_path = dir / "cli.err";
  pid_t pid = fork();
  if (pid == 0) {
    int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(out, 1);
    dup2(err, 2);
    std::vector<char*> argv;
    std::string bin = SLUICE_BINARY;
    argv.push_back(bin.data());
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(bin.c_str(), argv.data());
    _exit(127);
  }
  CliResult r;
  int status = 0;
  waitpid(pid, &status, 0);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(out_path);
  r.err = slurp(err_path);
  return r;
}

}  // namespace sluice::audit::testing
