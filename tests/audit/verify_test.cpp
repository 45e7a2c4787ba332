// verify: an intact chain passes; edited, deleted, inserted and reordered rows are named.
#include <gtest/gtest.h>

#include "audit_test_util.hpp"
#include "sluice/audit/store.hpp"

namespace sluice::audit {
namespace {

using testing::RawDb;
using testing::TempDir;

class VerifyTest : public ::testing::Test {
 protected:
  void SetUp() override { testing::populate(db_); }

  VerifyResult run() {
    auto v = verify(db_);
    EXPECT_TRUE(v.has_value()) << v.error().message;
    return v.value_or(VerifyResult{});
  }
  void expectBroken(const std::string& mention) {
    VerifyResult v = run();
    EXPECT_FALSE(v.ok);
    EXPECT_NE(v.first_broken.find(mention), std::string::npos) << v.first_broken;
  }

  TempDir dir_;
  std::filesystem::path db_ = dir_ / "audit.db";
};

TEST_F(VerifyTest, IntactChainPassesWithCount) {
  VerifyResult v = run();
  EXPECT_TRUE(v.ok) << v.first_broken;
  EXPECT_EQ(v.rows, 23u);  // 2 x (5 connections + 5 requests + 1 execution) + 1 policy
  EXPECT_EQ(v.first_broken, "");
}

TEST_F(VerifyTest, EmptyDatabasePasses) {
  TempDir other;
  auto db = other / "empty.db";
  { ASSERT_TRUE(testing::openStore(db)); }
  auto v = verify(db);
  ASSERT_TRUE(v.has_value());
  EXPECT_TRUE(v->ok);
  EXPECT_EQ(v->rows, 0u);
}

TEST_F(VerifyTest, EditedConnectionIsNamed) {
  RawDb(db_).exec("UPDATE connections SET host = 'evil.example' WHERE seq = 5");
  expectBroken("connections seq 5 (id c-exec-1-2): hash does not match");
}

TEST_F(VerifyTest, EditedForwardIsNamed) {
  {
    auto store = testing::openStore(db_);
    ASSERT_TRUE(store);
    store->recordForward(testing::sampleForward(7, "exec-2"));
    ASSERT_TRUE(store->flush().has_value());
  }
  EXPECT_TRUE(run().ok);
  RawDb(db_).exec("UPDATE forwards SET path = '/v1/other' WHERE seq = 24");
  expectBroken("forwards seq 24 (id 24): hash does not match");
}

TEST_F(VerifyTest, DeletedForwardIsDetected) {
  {
    auto store = testing::openStore(db_);
    ASSERT_TRUE(store);
    store->recordForward(testing::sampleForward(7, "exec-2"));
    store->recordRequest(testing::sampleRequest(7, "exec-2"));
    ASSERT_TRUE(store->flush().has_value());
  }
  RawDb(db_).exec("DELETE FROM forwards WHERE seq = 24");
  expectBroken("requests seq 25");
}

TEST_F(VerifyTest, EditedDecisionIsNamed) {
  RawDb(db_).exec("UPDATE connections SET decision = 'allow' WHERE decision = 'deny'");
  expectBroken("connections seq 5");
}

TEST_F(VerifyTest, EditedReceiptIsNamed) {
  RawDb(db_).exec("UPDATE executions SET exit_code = 1 WHERE id = 'exec-2'");
  expectBroken("executions seq 22 (id exec-2)");
}

TEST_F(VerifyTest, EditedSecretNamesAreNamed) {
  RawDb(db_).exec("UPDATE requests SET injected_secrets = '[]' WHERE seq = 2");
  expectBroken("requests seq 2 (id 2)");
}

TEST_F(VerifyTest, DeletedRowIsNamed) {
  RawDb(db_).exec("DELETE FROM requests WHERE seq = 4");
  expectBroken("connections seq 5 (id c-exec-1-2): sequence gap: rows 4..4 are missing");
}

TEST_F(VerifyTest, DeletedLastRowIsDetected) {
  RawDb(db_).exec("DELETE FROM policies WHERE seq = 23");
  expectBroken("chain_head");
}

TEST_F(VerifyTest, DeletedRowWithRenumberingIsDetected) {
  // A careful forger deletes a row and shifts the later seqs down to close the gap.
  RawDb raw(db_);
  raw.exec("DELETE FROM connections WHERE seq = 5");
  raw.exec("UPDATE connections SET seq = seq - 1 WHERE seq > 5");
  raw.exec("UPDATE requests SET seq = seq - 1 WHERE seq > 5");
  raw.exec("UPDATE executions SET seq = seq - 1 WHERE seq > 5");
  expectBroken("seq 5");
}

TEST_F(VerifyTest, InsertedRowIsDetected) {
  RawDb raw(db_);
  // A copy of a real row with a fresh seq at the end, its hashes copied too.
  raw.exec(
      "INSERT INTO connections (seq, id, execution_id, workflow, policy_sha256, ts, kind, host, "
      "port, resolved_ip, decision, rule_id, reason, detail, tls, bytes_up, bytes_down, "
      "duration_ms, prev_hash, hash) SELECT 23, 'forged', execution_id, workflow, policy_sha256, "
      "ts, kind, host, port, resolved_ip, decision, rule_id, reason, detail, tls, bytes_up, "
      "bytes_down, duration_ms, prev_hash, hash FROM connections WHERE seq = 1");
  expectBroken("connections seq 23 (id forged)");
}

TEST_F(VerifyTest, InsertedRowWithDuplicateSeqIsDetected) {
  RawDb raw(db_);
  raw.exec(
      "INSERT INTO executions (seq, id, workflow, started_at, ended_at, exit_code, signal, "
      "stdout_bytes, stderr_bytes, stdout_truncated, stderr_truncated, prev_hash, hash) "
      "VALUES (3, 'forged', 'w', 0, 0, 0, 0, 0, 0, 0, 0, 'x', 'y')");
  expectBroken("seq 3");
}

TEST_F(VerifyTest, InsertedRowBeforeTheFirstSeqIsDetected) {
  // seq 0 and below are outside the chain: the walk must still see such a row, not skip it.
  RawDb raw(db_);
  ASSERT_EQ(
      raw.exec(
          "INSERT INTO executions (seq, id, workflow, started_at, ended_at, exit_code, signal, "
          "stdout_bytes, stderr_bytes, stdout_truncated, stderr_truncated, prev_hash, hash) "
          "VALUES (-5, 'forged', 'w', 0, 0, 0, 0, 0, 0, 0, 0, 'x', 'y')"),
      "");
  expectBroken("executions seq -5 (id forged)");
}

TEST_F(VerifyTest, ReorderedRowsAreDetected) {
  RawDb raw(db_);
  // Swap the positions of two connections.
  raw.exec("UPDATE connections SET seq = -1 WHERE seq = 1");
  raw.exec("UPDATE connections SET seq = 1 WHERE seq = 3");
  raw.exec("UPDATE connections SET seq = 3 WHERE seq = -1");
  expectBroken("connections seq 1");
}

TEST_F(VerifyTest, EditedPolicyTextIsDetected) {
  RawDb(db_).exec("UPDATE policies SET yaml = yaml || '# allow everything'");
  expectBroken("policies seq 23 (sha256 " + testing::sha256Hex(testing::kPolicyText) +
               "): hash does not match");
}

// Version 6: a policy row is a link of the chain, so what version 5 left outside it (the
// workflow name, loaded_at, the row itself) is covered.
TEST_F(VerifyTest, EditedPolicyWorkflowOrLoadTimeOrDeletedPolicyIsDetected) {
  for (std::string edit :
       {"UPDATE policies SET workflow = 'other'",
        "UPDATE policies SET loaded_at = loaded_at - 86400000", "DELETE FROM policies"}) {
    TempDir other;
    auto db = other / "audit.db";
    testing::populate(db);
    RawDb(db).exec(edit);
    auto v = verify(db);
    ASSERT_TRUE(v.has_value()) << v.error().message;
    EXPECT_FALSE(v->ok) << edit;
  }
}

// A policy row whose text was re-keyed and re-hashed (so the chain holds) still fails: the key
// must be the SHA-256 of the text.
TEST_F(VerifyTest, RehashedPolicyWithTheWrongKeyIsDetected) {
  TempDir other;
  auto db = other / "audit.db";
  {
    auto store = testing::openStore(db);
    ASSERT_TRUE(store);
    testing::recordSamplePolicy(*store);
    ASSERT_TRUE(store->flush().has_value());
  }
  RawDb raw(db);
  // Recompute the row's hash over an edited text by hand (docs/audit.md "Hash chain").
  const std::string yaml = testing::kPolicyText + "# allow everything\n";
  std::string enc = std::string("sluice-audit-v1") + '\0' + "policies" + '\0';
  auto u64 = [&](std::uint64_t v) {
    for (int i = 7; i >= 0; --i) enc += static_cast<char>((v >> (8 * i)) & 0xff);
  };
  auto text = [&](const std::string& t) {
    enc += 'T';
    u64(t.size());
    enc += t;
  };
  enc += 'I';
  u64(1);
  text(std::string(64, '0'));
  text(testing::sha256Hex(testing::kPolicyText));
  text("data-analysis");
  text(yaml);
  enc += 'I';
  u64(static_cast<std::uint64_t>(raw.integer("SELECT loaded_at FROM policies")));
  const std::string hash = testing::sha256Hex(enc);
  ASSERT_EQ(raw.exec("UPDATE policies SET yaml = '" + yaml + "', hash = '" + hash +
                     "'; UPDATE chain_head SET hash = '" + hash + "'"),
            "");
  auto v = verify(db);
  ASSERT_TRUE(v.has_value());
  EXPECT_FALSE(v->ok);
  EXPECT_NE(v->first_broken.find("the policy text does not match its sha256"), std::string::npos)
      << v->first_broken;
}

TEST_F(VerifyTest, MissingFileIsAnErrorAndNotCreated) {
  auto missing = dir_ / "missing.db";
  auto v = verify(missing);
  ASSERT_FALSE(v.has_value());
  EXPECT_NE(v.error().message.find(missing.string()), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(missing));
}

}  // namespace
}  // namespace sluice::audit
