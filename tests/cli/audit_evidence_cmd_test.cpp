// Signed evidence as a user runs it: `sluice audit keygen`, `sluice run --signing-key`, `audit
// verify
// --pubkey`, prove / check-proof, export / verify-export, attest / verify-attestation; and the
// signing key's boundary: a sandboxed program cannot read the key file and does not get it in
// its environment, and sluice's logs (at debug) do not carry it. And `audit prove` on stores of
// thousands and a million rows: the in-memory tree's proofs, in memory that does not grow with
// the rows.
#include <gtest/gtest.h>
#include <sys/ptrace.h>
#include <sys/stat.h>

#include <csignal>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "audit_test_util.hpp"
#include "chain_rows.hpp"
#include "merkle.hpp"
#include "sluice/audit/evidence.hpp"
#include "sluice/audit/signing.hpp"

namespace sluice::audit {
namespace {

using testing::CliResult;
using testing::RawDb;
using testing::runCli;
using testing::slurp;
using testing::TempDir;

void writeFile(const std::filesystem::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary) << text;
}

class EvidenceCmdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CliResult k = runCli(dir_, {"audit", "keygen", "--out", (dir_ / "keys").string()});
    ASSERT_EQ(k.exit_code, 0) << k.err;
    EXPECT_NE(k.out.find("key id "), std::string::npos);
    writeFile(policy_, "apiVersion: sluice/v1\nkind: Workflow\nname: evidence\n");
  }
  /// `sluice run` with the signing key: needs the sandbox (root, namespaces).
  CliResult run(const std::vector<std::string>& command, bool with_output_dir = true) {
    std::vector<std::string> args = {"run",         "--policy",   policy_.string(),
                                     "--audit",     db_.string(), "--signing-key",
                                     key_.string(), "--receipt",  (dir_ / "receipt.json").string()};
    if (with_output_dir) {
      std::filesystem::create_directories(dir_ / "out");
      args.insert(args.end(), {"--output-dir", (dir_ / "out").string()});
    }
    args.push_back("--");
    args.insert(args.end(), command.begin(), command.end());
    return runCli(dir_, args);
  }
  std::string executionId() {
    auto receipt = nlohmann::json::parse(slurp(dir_ / "receipt.json"), nullptr, false);
    return receipt.is_object() ? receipt.value("execution_id", "") : "";
  }

  TempDir dir_;
  std::filesystem::path db_ = dir_ / "audit.db";
  std::filesystem::path key_ = dir_ / "keys" / "audit.key";
  std::filesystem::path pub_ = dir_ / "keys" / "audit.pub";
  std::filesystem::path policy_ = dir_ / "policy.yaml";
};

TEST_F(EvidenceCmdTest, KeygenRefusesToOverwrite) {
  std::string before = slurp(key_);
  CliResult again = runCli(dir_, {"audit", "keygen", "--out", (dir_ / "keys").string()});
  EXPECT_EQ(again.exit_code, 2);
  EXPECT_NE(again.err.find("already exists"), std::string::npos) << again.err;
  EXPECT_EQ(slurp(key_), before);
}

TEST_F(EvidenceCmdTest, RunRefusesAKeyOthersCanRead) {
  ASSERT_EQ(::chmod(key_.c_str(), 0644), 0);
  CliResult r = run({"true"}, false);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find(key_.string()), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("chmod 600"), std::string::npos) << r.err;
}

TEST_F(EvidenceCmdTest, SignedRunThenEveryEvidenceCommand) {
  if (::geteuid() != 0) SLUICE_SKIP_OR_FAIL("sluice run needs root for its sandbox here");
  CliResult r = run({"sh", "-c", "echo hi > /output/report.txt"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string id = executionId();
  ASSERT_FALSE(id.empty());

  CliResult v = runCli(dir_, {"audit", "verify", "--db", db_.string(), "--pubkey", pub_.string()});
  EXPECT_EQ(v.exit_code, 0) << v.out << v.err;
  EXPECT_NE(v.out.find("last signed position: 2; unsigned tail: 0 rows"), std::string::npos)
      << v.out;

  // prove / check-proof, without the database; a tampered receipt is rejected (exit 1).
  CliResult p = runCli(dir_, {"audit", "prove", "--db", db_.string(), "--execution", id});
  ASSERT_EQ(p.exit_code, 0) << p.err;
  writeFile(dir_ / "proof.json", p.out);
  std::filesystem::rename(db_, dir_ / "elsewhere.db");
  CliResult ok = runCli(
      dir_, {"audit", "check-proof", "--pubkey", pub_.string(), (dir_ / "proof.json").string()});
  EXPECT_EQ(ok.exit_code, 0) << ok.out << ok.err;
  EXPECT_NE(ok.out.find("ok: execution " + id), std::string::npos) << ok.out;
  auto proof = nlohmann::json::parse(p.out);
  proof["row"]["columns"]["exit_code"] = 3;
  writeFile(dir_ / "bad.json", proof.dump());
  CliResult bad = runCli(
      dir_, {"audit", "check-proof", "--pubkey", pub_.string(), (dir_ / "bad.json").string()});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.out.find("REJECTED: row: its hash does not match"), std::string::npos) << bad.out;
  std::filesystem::rename(dir_ / "elsewhere.db", db_);

  // export / verify-export.
  CliResult e = runCli(dir_, {"audit", "export", "--db", db_.string()});
  ASSERT_EQ(e.exit_code, 0) << e.err;
  EXPECT_NE(e.err.find("next time: --after-seq 2"), std::string::npos) << e.err;
  writeFile(dir_ / "export.jsonl", e.out);
  CliResult ve = runCli(dir_, {"audit", "verify-export", "--pubkey", pub_.string(),
                               (dir_ / "export.jsonl").string()});
  EXPECT_EQ(ve.exit_code, 0) << ve.out << ve.err;
  std::string edited = e.out;
  edited.replace(edited.find("\"exit_code\":0"), 13, "\"exit_code\":1");
  writeFile(dir_ / "edited.jsonl", edited);
  CliResult vb = runCli(dir_, {"audit", "verify-export", (dir_ / "edited.jsonl").string()});
  EXPECT_EQ(vb.exit_code, 1);
  EXPECT_NE(vb.out.find("line 2 (executions seq 2): hash does not match"), std::string::npos)
      << vb.out;

  // attest / verify-attestation: the artifact's real digest; another key's pubkey rejects it.
  CliResult a = runCli(dir_, {"audit", "attest", "--db", db_.string(), "--execution", id,
                              "--signing-key", key_.string()});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  writeFile(dir_ / "att.json", a.out);
  CliResult va = runCli(dir_, {"audit", "verify-attestation", "--pubkey", pub_.string(),
                               (dir_ / "att.json").string()});
  EXPECT_EQ(va.exit_code, 0) << va.out << va.err;
  EXPECT_NE(va.out.find("  report.txt sha256:" + testing::sha256Hex("hi\n")), std::string::npos)
      << va.out;
  ASSERT_EQ(runCli(dir_, {"audit", "keygen", "--out", (dir_ / "other").string()}).exit_code, 0);
  CliResult vo =
      runCli(dir_, {"audit", "verify-attestation", "--pubkey",
                    (dir_ / "other" / "audit.pub").string(), (dir_ / "att.json").string()});
  EXPECT_EQ(vo.exit_code, 1);
  EXPECT_NE(vo.out.find("REJECTED"), std::string::npos) << vo.out;
}

// The key is read by sluice before the sandbox exists; the sandbox has no host /tmp or home,
// so the key file's path does not resolve there, and neither the path nor the key's text is
// in the program's environment.
TEST_F(EvidenceCmdTest, SandboxedProgramCannotReadTheSigningKey) {
  if (::geteuid() != 0) SLUICE_SKIP_OR_FAIL("sluice run needs root for its sandbox here");
  const std::string pem = slurp(key_);
  std::string body = pem.substr(pem.find('\n') + 1);
  body = body.substr(0, body.find('\n'));
  ::setenv("SLUICE_LOG_LEVEL", "debug", 1);  // sluice's own logs must not carry it either
  CliResult r = run({"sh", "-c",
                     "cat '" + key_.string() + "' && echo READ-THE-KEY; ls -la '" +
                         key_.parent_path().string() + "'; env; cat /proc/self/environ"},
                    false);
  EXPECT_EQ(r.exit_code, 0) << r.err;  // the shell's own exit: the last command's
  ::unsetenv("SLUICE_LOG_LEVEL");
  EXPECT_EQ(r.out.find("READ-THE-KEY"), std::string::npos) << r.out;
  EXPECT_EQ(r.err.find(body), std::string::npos);
  EXPECT_EQ(r.err.find("PRIVATE KEY"), std::string::npos);
  EXPECT_EQ(r.out.find(body), std::string::npos);
  EXPECT_EQ(r.out.find("PRIVATE KEY"), std::string::npos);
  EXPECT_EQ(r.out.find(key_.string() + "\n"), std::string::npos);
  EXPECT_EQ(r.out.find("audit.key"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("No such file or directory"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("PATH="), std::string::npos) << "env ran: " << r.out;
  // And the run was still signed.
  CliResult v = runCli(dir_, {"audit", "verify", "--db", db_.string(), "--pubkey", pub_.string()});
  EXPECT_EQ(v.exit_code, 0) << v.out;
  EXPECT_NE(v.out.find("last signed position: 2"), std::string::npos) << v.out;
}

// `sluice run --input`: the receipt lists every regular file given (a file, and a directory
// walked without following its symlinks) with the sha256 of what was read at run time; the
// receipt stays valid against its schema; the attestation names each as a resolved dependency
// with that digest; and editing an input afterwards changes neither.
TEST_F(EvidenceCmdTest, RunWithInputsListsTheirDigestsInReceiptAndAttestation) {
  if (::geteuid() != 0) SLUICE_SKIP_OR_FAIL("sluice run needs root for its sandbox here");
  namespace fs = std::filesystem;
  fs::create_directories(dir_ / "in" / "data" / "sub");
  fs::create_directories(dir_ / "outside-dir");
  writeFile(dir_ / "in" / "notes.txt", "notes\n");
  writeFile(dir_ / "in" / "data" / "a.txt", "alpha\n");
  writeFile(dir_ / "in" / "data" / "sub" / "deep.txt", "deep\n");
  writeFile(dir_ / "outside.txt", "outside\n");
  writeFile(dir_ / "outside-dir" / "x.txt", "x\n");
  fs::create_symlink(dir_ / "outside.txt", dir_ / "in" / "data" / "link.txt");
  fs::create_directory_symlink(dir_ / "outside-dir", dir_ / "in" / "data" / "linkdir");
  fs::create_directories(dir_ / "out");
  CliResult r =
      runCli(dir_, {"run", "--policy", policy_.string(), "--audit", db_.string(), "--signing-key",
                    key_.string(), "--receipt", (dir_ / "receipt.json").string(), "--output-dir",
                    (dir_ / "out").string(), "--input", (dir_ / "in" / "notes.txt").string(),
                    "--input", (dir_ / "in" / "data").string() + ":data", "--", "sh", "-c",
                    "cat /input/data/a.txt /input/notes.txt > /output/copy.txt"});
  ASSERT_EQ(r.exit_code, 0) << r.err;

  const std::string in = fs::canonical(dir_ / "in").string();
  auto entry = [&](const std::string& path, const std::string& source, const std::string& text) {
    return nlohmann::json{{"path", path},
                          {"source", in + "/" + source},
                          {"bytes", text.size()},
                          {"sha256", testing::sha256Hex(text)}};
  };
  const nlohmann::json expected = {entry("/input/data/a.txt", "data/a.txt", "alpha\n"),
                                   entry("/input/data/sub/deep.txt", "data/sub/deep.txt", "deep\n"),
                                   entry("/input/notes.txt", "notes.txt", "notes\n")};
  auto receipt = nlohmann::json::parse(slurp(dir_ / "receipt.json"), nullptr, false);
  ASSERT_TRUE(receipt.is_object());
  EXPECT_EQ(receipt["inputs"], expected) << receipt["inputs"].dump(1);
  EXPECT_EQ(receipt["inputs_truncated"], false);

  if (std::system("python3 -c 'import jsonschema' 2>/dev/null") != 0) {
    if (testing::isolationRequired()) FAIL() << "python3-jsonschema missing";
  } else {
    const std::string validate =
        "python3 -c 'import json,sys,jsonschema; "
        "jsonschema.validate(json.load(open(sys.argv[1])), json.load(open(sys.argv[2])))' " +
        (dir_ / "receipt.json").string() + " " SLUICE_SOURCE_DIR "/schemas/receipt.v1.schema.json";
    EXPECT_EQ(std::system(validate.c_str()), 0);
  }

  // The host file changes after the run: the stored receipt keeps what was read.
  writeFile(dir_ / "in" / "data" / "a.txt", "changed after the run\n");
  CliResult q = runCli(dir_, {"audit", "sql", "--db", db_.string(), "--format", "json",
                              "SELECT receipt FROM executions"});
  ASSERT_EQ(q.exit_code, 0) << q.err;
  auto rows = nlohmann::json::parse(q.out, nullptr, false);
  ASSERT_TRUE(rows.is_array() && rows.size() == 1u) << q.out;
  EXPECT_EQ(rows[0]["receipt"]["inputs"], expected);

  CliResult a =
      runCli(dir_, {"audit", "attest", "--db", db_.string(), "--execution",
                    receipt["execution_id"].get<std::string>(), "--signing-key", key_.string()});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  writeFile(dir_ / "att.json", a.out);
  CliResult va = runCli(dir_, {"audit", "verify-attestation", "--pubkey", pub_.string(),
                               (dir_ / "att.json").string()});
  EXPECT_EQ(va.exit_code, 0) << va.out << va.err;
  auto pub = PublicKey::load(pub_);
  ASSERT_TRUE(pub.has_value());
  AttestationCheck c = verifyAttestation(a.out, **pub);
  ASSERT_TRUE(c.ok) << c.reason;
  const auto statement = nlohmann::json::parse(c.statement_json);
  nlohmann::json inputs = nlohmann::json::array();
  for (const auto& d : statement["predicate"]["buildDefinition"]["resolvedDependencies"])
    if (d["uri"].get<std::string>().starts_with("file://")) inputs.push_back(d);
  nlohmann::json want = nlohmann::json::array();
  for (const auto& e : expected)
    want.push_back({{"uri", "file://" + e["path"].get<std::string>()},
                    {"digest", {{"sha256", e["sha256"]}}},
                    {"annotations", {{"source", e["source"]}}}});
  EXPECT_EQ(inputs, want) << inputs.dump(1);
}

// Past 10,000 files an input directory is cut, and the receipt says so (and stays valid).
TEST_F(EvidenceCmdTest, InputsPastTenThousandFilesAreCutAndSaySo) {
  if (::geteuid() != 0) SLUICE_SKIP_OR_FAIL("sluice run needs root for its sandbox here");
  std::filesystem::create_directories(dir_ / "many");
  for (int i = 0; i <= 10000; ++i) writeFile(dir_ / "many" / ("f" + std::to_string(i)), "");
  CliResult r = runCli(
      dir_, {"run", "--policy", policy_.string(), "--receipt", (dir_ / "receipt.json").string(),
             "--input", (dir_ / "many").string(), "--", "true"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto receipt = nlohmann::json::parse(slurp(dir_ / "receipt.json"), nullptr, false);
  ASSERT_TRUE(receipt.is_object());
  EXPECT_EQ(receipt["inputs"].size(), 10000u);
  EXPECT_EQ(receipt["inputs_truncated"], true);
  EXPECT_EQ(receipt["inputs"][0]["sha256"], testing::sha256Hex(""));
}

/// A signed store of `rows` rows: execution exec-first at seq 1, exec-middle half way and
/// exec-last at seq `rows`, connections between; signed every `checkpoint_rows` rows and at close.
void writeSignedStore(const std::filesystem::path& db, std::shared_ptr<const SigningKey> key,
                      int rows, std::size_t checkpoint_rows) {
  StoreOptions o;
  o.signing_key = std::move(key);
  o.checkpoint_rows = checkpoint_rows;
  auto store = testing::openStore(db, o);
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->recordExecution(testing::sampleExecution("exec-first")).has_value());
  for (int i = 1; i < rows - 1; ++i) {
    if (i == rows / 2) {
      ASSERT_TRUE(store->recordExecution(testing::sampleExecution("exec-middle")).has_value());
    } else {
      store->recordConnection(testing::sampleConnection(i, "exec-first"));
    }
  }
  ASSERT_TRUE(store->recordExecution(testing::sampleExecution("exec-last")).has_value());
}

/// The leaves of rows 1..position read all at once, for the in-memory inclusionPath and
/// subtreeRoot that prove used before it streamed them.
std::vector<detail::Digest> allLeaves(const std::filesystem::path& db, std::int64_t position) {
  RawDb raw(db);
  sqlite3_stmt* s = nullptr;
  std::string sql = detail::chainHashesSql("seq <= " + std::to_string(position));
  EXPECT_EQ(sqlite3_prepare_v2(raw.get(), sql.c_str(), -1, &s, nullptr), SQLITE_OK);
  std::vector<detail::Digest> leaves;
  while (sqlite3_step(s) == SQLITE_ROW) {
    leaves.push_back(detail::leafHash(
        *detail::fromHex(reinterpret_cast<const char*>(sqlite3_column_text(s, 1)))));
  }
  sqlite3_finalize(s);
  return leaves;
}

TEST(EvidenceProveCmdTest, ProofsAreTheInMemoryTreesAndCheckProofAcceptsThem) {
  TempDir dir;
  const auto db = dir / "audit.db";
  const auto pub = dir / "audit.pub";
  auto key = *SigningKey::generate();
  writeFile(pub, key->publicKeyPem());
  constexpr int kRows = 3001;
  writeSignedStore(db, key, kRows, 1000);
  if (HasFatalFailure()) return;
  // Rows after the latest checkpoint (a writer without the key) are outside its tree.
  {
    auto unsigned_store = testing::openStore(db);
    ASSERT_TRUE(unsigned_store);
    for (int i = 0; i < 5; ++i)
      unsigned_store->recordConnection(testing::sampleConnection(i, "exec-later"));
  }
  ASSERT_EQ(RawDb(db).integer("SELECT max(seq) FROM connections"), kRows + 5);
  const std::vector<detail::Digest> leaves = allLeaves(db, kRows);
  ASSERT_EQ(leaves.size(), static_cast<std::size_t>(kRows));
  const std::string root = detail::toHex(detail::subtreeRoot(leaves));

  for (std::string id : {"exec-first", "exec-middle", "exec-last"}) {
    SCOPED_TRACE(id);
    const std::int64_t seq =
        RawDb(db).integer("SELECT seq FROM executions WHERE id = '" + id + "'");
    CliResult p = runCli(dir, {"audit", "prove", "--db", db.string(), "--execution", id});
    ASSERT_EQ(p.exit_code, 0) << p.err;
    EXPECT_EQ(p.out, proveExecution(db, id).value_or(""));
    auto proof = nlohmann::json::parse(p.out);
    EXPECT_EQ(proof["leaf_index"], seq - 1);
    EXPECT_EQ(proof["tree_size"], kRows);
    EXPECT_EQ(proof["checkpoint"]["position"], kRows);
    EXPECT_EQ(proof["checkpoint"]["root"], root);
    std::vector<std::string> path;
    for (const auto& d : detail::inclusionPath(leaves, static_cast<std::uint64_t>(seq - 1)))
      path.push_back(detail::toHex(d));
    EXPECT_EQ(proof["audit_path"].get<std::vector<std::string>>(), path);

    writeFile(dir / "proof.json", p.out);
    CliResult c = runCli(
        dir, {"audit", "check-proof", "--pubkey", pub.string(), (dir / "proof.json").string()});
    EXPECT_EQ(c.exit_code, 0) << c.out << c.err;
    EXPECT_NE(c.out.find("ok: execution " + id), std::string::npos) << c.out;
  }
}

/// `sluice ARGS`, output to files in `dir`: the exit code and the child's peak RSS in KiB. The
/// peak is VmHWM read from /proc while the child is stopped on its way out (ptrace's exit
/// event: its memory is still there); wait4's ru_maxrss would not do, since exec carries the
/// forking test's own high-water mark over into it.
struct PeakRun {
  int exit_code = -1;
  long max_rss_kib = -1;
};
long vmHwmKib(pid_t pid) {
  std::istringstream status(slurp("/proc/" + std::to_string(pid) + "/status"));
  for (std::string line; std::getline(status, line);)
    if (line.starts_with("VmHWM:")) return std::stol(line.substr(6));
  return -1;
}
PeakRun runCliPeak(const TempDir& dir, std::vector<std::string> args) {
  pid_t pid = fork();
  if (pid == 0) {
    int out = open((dir / "peak.out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int err = open((dir / "peak.err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(out, 1);
    dup2(err, 2);
    std::string bin = SLUICE_BINARY;
    std::vector<char*> argv = {bin.data()};
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (ptrace(PTRACE_TRACEME, 0, nullptr, nullptr) != 0) _exit(126);
    execv(bin.c_str(), argv.data());  // stops with SIGTRAP once exec'd
    _exit(127);
  }
  PeakRun r;
  int status = 0;
  bool options_set = false;
  while (waitpid(pid, &status, 0) == pid) {
    if (WIFEXITED(status) || WIFSIGNALED(status)) {
      r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      break;
    }
    int deliver = 0;
    if (status >> 8 == (SIGTRAP | (PTRACE_EVENT_EXIT << 8))) {
      r.max_rss_kib = vmHwmKib(pid);
    } else if (WSTOPSIG(status) == SIGTRAP && !options_set) {
      ptrace(PTRACE_SETOPTIONS, pid, nullptr, PTRACE_O_TRACEEXIT);
      options_set = true;
    } else {
      deliver = WSTOPSIG(status);  // a signal of its own: pass it on
    }
    ptrace(PTRACE_CONT, pid, nullptr, deliver);
  }
  return r;
}

// Slow (builds a 1,000,000-row store: about 5 s here). prove streams the leaves instead of
// holding them: with them in memory its peak was 40 MiB here, 32 MB of it digests; streaming,
// 9.6 MiB, about 1 MiB above a prove that reads no leaves (an unknown execution: 8.5 MiB).
// The bounds leave room for another allocator or SQLite build, not for the leaves.
TEST(EvidenceProveCmdSlowTest, ProveOfAMillionRowStoreStaysInBoundedMemory) {
  TempDir dir;
  const auto db = dir / "audit.db";
  auto key = *SigningKey::generate();
  writeFile(dir / "audit.pub", key->publicKeyPem());
  writeSignedStore(db, key, 1'000'000, 65'536);
  if (HasFatalFailure()) return;

  PeakRun none = runCliPeak(dir, {"audit", "prove", "--db", db.string(), "--execution", "nope"});
  EXPECT_EQ(none.exit_code, 2);
  PeakRun p =
      runCliPeak(dir, {"audit", "prove", "--db", db.string(), "--execution", "exec-middle"});
  ASSERT_EQ(p.exit_code, 0) << slurp(dir / "peak.err");
  ASSERT_GT(none.max_rss_kib, 0) << "no VmHWM read at the child's exit";
  ASSERT_GT(p.max_rss_kib, 0) << "no VmHWM read at the child's exit";
  EXPECT_LT(p.max_rss_kib, 24 * 1024);
  EXPECT_LT(p.max_rss_kib - none.max_rss_kib, 8 * 1024)
      << "prove: " << p.max_rss_kib << " KiB; without reading leaves: " << none.max_rss_kib;
  auto proof = nlohmann::json::parse(slurp(dir / "peak.out"));
  EXPECT_EQ(proof["tree_size"], 1'000'000);
  EXPECT_EQ(proof["audit_path"].size(), 20u);
  CliResult c = runCli(dir, {"audit", "check-proof", "--pubkey", (dir / "audit.pub").string(),
                             (dir / "peak.out").string()});
  EXPECT_EQ(c.exit_code, 0) << c.out << c.err;
}

}  // namespace
}  // namespace sluice::audit
