// Issue 15 as a user runs it: `sluice audit keygen`, `sluice run --signing-key`, `audit verify
// --pubkey`, prove / check-proof, export / verify-export, attest / verify-attestation; and the
// signing key's boundary: a sandboxed program cannot read the key file and does not get it in
// its environment, and sluice's logs (at debug) do not carry it.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "audit_test_util.hpp"

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
  EXPECT_NE(v.out.find("last signed position: 1; unsigned tail: 0 rows"), std::string::npos)
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
  EXPECT_NE(e.err.find("next time: --after-seq 1"), std::string::npos) << e.err;
  writeFile(dir_ / "export.jsonl", e.out);
  CliResult ve = runCli(dir_, {"audit", "verify-export", "--pubkey", pub_.string(),
                               (dir_ / "export.jsonl").string()});
  EXPECT_EQ(ve.exit_code, 0) << ve.out << ve.err;
  std::string edited = e.out;
  edited.replace(edited.find("\"exit_code\":0"), 13, "\"exit_code\":1");
  writeFile(dir_ / "edited.jsonl", edited);
  CliResult vb = runCli(dir_, {"audit", "verify-export", (dir_ / "edited.jsonl").string()});
  EXPECT_EQ(vb.exit_code, 1);
  EXPECT_NE(vb.out.find("line 1 (executions seq 1): hash does not match"), std::string::npos)
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
  EXPECT_NE(v.out.find("last signed position: 1"), std::string::npos) << v.out;
}

}  // namespace
}  // namespace sluice::audit
