// Checkpoint consistency, as an auditor runs it. Verification fails closed: `audit verify
// --pubkey` on a log with no signed checkpoint (an empty one, or a copy taken without its -wal
// file) exits 1 saying it is unsigned, and `--require-signed-tail` refuses unsigned rows after
// the last checkpoint. Append-only, provable: `audit checkpoint --json` prints the latest
// checkpoint to keep, and `audit verify --consistent-with` proves the log extends it, or names
// where history was rewritten (a truncated-and-regrown log, a row rewritten and re-signed with
// a stolen key).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "audit_test_util.hpp"
#include "sluice/audit/signing.hpp"
#include "sluice/audit/store.hpp"

namespace sluice::audit {
namespace {

using testing::CliResult;
using testing::RawDb;
using testing::runCli;
using testing::TempDir;

class ConsistencyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    key_ = *SigningKey::generate();
    std::ofstream(pub_) << key_->publicKeyPem();
  }
  /// Connections first..first+rows-1 (sampleConnection: the same n gives the same row), one
  /// commit each, signed with `key` (if any) every `every` rows and at close; the connection
  /// numbered `rewritten` gets another host.
  void write(const std::filesystem::path& db, int first, int rows,
             std::shared_ptr<const SigningKey> key, std::size_t every = 1000,
             bool checkpoint_on_close = true, int rewritten = -1) {
    StoreOptions o;
    o.signing_key = std::move(key);
    o.checkpoint_rows = every;
    o.checkpoint_on_close = checkpoint_on_close;
    auto store = testing::openStore(db, o);
    ASSERT_TRUE(store);
    for (int i = first; i < first + rows; ++i) {
      auto c = testing::sampleConnection(i);
      if (i == rewritten) c.host = "exfil.example";
      store->recordConnection(c);
      ASSERT_TRUE(store->flush().has_value());
    }
  }
  CliResult verifyCli(const std::filesystem::path& db, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"audit",     "verify",   "--db",
                                     db.string(), "--pubkey", pub_.string()};
    args.insert(args.end(), extra.begin(), extra.end());
    return runCli(dir_, args);
  }
  /// `audit checkpoint --json` kept in a file.
  std::filesystem::path keep(const std::filesystem::path& db, const std::string& name) {
    CliResult c = runCli(dir_, {"audit", "checkpoint", "--db", db.string(), "--json"});
    EXPECT_EQ(c.exit_code, 0) << c.err;
    auto file = dir_ / name;
    std::ofstream(file) << c.out;
    return file;
  }

  TempDir dir_;
  std::filesystem::path db_ = dir_ / "audit.db";
  std::filesystem::path pub_ = dir_ / "audit.pub";
  std::shared_ptr<const SigningKey> key_;
};

// ---- Item 3: verification fails closed ----------------------------------------------------

TEST_F(ConsistencyTest, PubkeyOnALogWithNoCheckpointFailsAsUnsigned) {
  write(db_, 0, 3, nullptr);  // a writer without the key
  CliResult v = verifyCli(db_);
  EXPECT_EQ(v.exit_code, 1) << v.out << v.err;
  EXPECT_NE(v.out.find("UNSIGNED: the log is unsigned: no checkpoint signed by key " +
                       key_->keyId() + " (3 rows are protected by the hash chain only)"),
            std::string::npos)
      << v.out;
  // Without a key nothing is claimed about signatures: the chain alone is intact.
  CliResult plain = runCli(dir_, {"audit", "verify", "--db", db_.string()});
  EXPECT_EQ(plain.exit_code, 0) << plain.out << plain.err;
}

// `sluice run` leaves its rows (and checkpoint) in the -wal file; a copy of the .db alone is
// the empty log it was before them, which must not pass as a verified log.
TEST_F(ConsistencyTest, CopyTakenWithoutItsWalFailsAndSaysTheWalIsMissing) {
  write(db_, 0, 4, key_, 1000, /*checkpoint_on_close=*/false);
  ASSERT_GT(std::filesystem::file_size(db_.string() + "-wal"), 0u);
  EXPECT_EQ(verifyCli(db_).exit_code, 0);
  const auto copy = dir_ / "copy" / "audit.db";
  std::filesystem::create_directories(copy.parent_path());
  std::filesystem::copy_file(db_, copy);
  CliResult v = verifyCli(copy);
  EXPECT_EQ(v.exit_code, 1) << v.out << v.err;
  EXPECT_NE(v.out.find("UNSIGNED: the log is unsigned"), std::string::npos) << v.out;
  EXPECT_NE(v.out.find("the -wal file is missing"), std::string::npos) << v.out;
  EXPECT_NE(v.err.find("audit.db-wal is missing"), std::string::npos) << v.err;
  // A genuinely empty log says the same: nothing signed is nothing verified.
  const auto empty = dir_ / "empty.db";
  write(empty, 0, 0, nullptr);
  CliResult e = verifyCli(empty);
  EXPECT_EQ(e.exit_code, 1) << e.out;
  EXPECT_NE(e.out.find("the log is unsigned"), std::string::npos) << e.out;
}

TEST_F(ConsistencyTest, UnsignedTailIsCountedAndRequireSignedTailRefusesIt) {
  write(db_, 0, 6, key_, 4);  // checkpoints at 4 and 6
  write(db_, 6, 2, nullptr);  // two rows no key signed
  CliResult v = verifyCli(db_);
  EXPECT_EQ(v.exit_code, 0) << v.out << v.err;
  EXPECT_NE(v.out.find("last signed position: 6; unsigned tail: 2 rows"), std::string::npos)
      << v.out;
  CliResult strict = verifyCli(db_, {"--require-signed-tail"});
  EXPECT_EQ(strict.exit_code, 1) << strict.out << strict.err;
  EXPECT_NE(
      strict.out.find("UNSIGNED TAIL: rows 7..8 (2 rows) are not covered by a signed checkpoint"),
      std::string::npos)
      << strict.out;
  // Signed again by the next writer with the key: the strict check passes.
  write(db_, 8, 1, key_);
  EXPECT_EQ(verifyCli(db_, {"--require-signed-tail"}).exit_code, 0);
  // The flag is about signatures: it needs the key.
  CliResult no_key =
      runCli(dir_, {"audit", "verify", "--db", db_.string(), "--require-signed-tail"});
  EXPECT_NE(no_key.exit_code, 0);
}

// ---- Item 4: append-only, provable --------------------------------------------------------

TEST_F(ConsistencyTest, CheckpointJsonIsTheLatestSignedCheckpointWithItsSignature) {
  CliResult none = runCli(dir_, {"audit", "checkpoint", "--db", db_.string(), "--json"});
  EXPECT_EQ(none.exit_code, 2) << "no database yet: " << none.err;
  write(db_, 0, 3, nullptr);
  none = runCli(dir_, {"audit", "checkpoint", "--db", db_.string(), "--json"});
  EXPECT_EQ(none.exit_code, 1) << none.out;
  EXPECT_NE(none.err.find("no checkpoint yet"), std::string::npos) << none.err;

  write(db_, 3, 9, key_, 5);  // checkpoints at 5, 10 and 12
  auto j = nlohmann::json::parse(testing::slurp(keep(db_, "kept.json")));
  RawDb raw(db_);
  EXPECT_EQ(j["seq"], 3);
  EXPECT_EQ(j["position"], 12);
  EXPECT_EQ(j["root"], raw.text("SELECT root FROM checkpoints WHERE seq = 3"));
  EXPECT_EQ(j["key_id"], key_->keyId());
  EXPECT_EQ(j["frontier"], raw.text("SELECT frontier FROM checkpoints WHERE seq = 3"));
  EXPECT_EQ(j["ts"], raw.integer("SELECT ts FROM checkpoints WHERE seq = 3"));
  // With --pubkey it is printed only when that key signed it.
  CliResult checked = runCli(
      dir_, {"audit", "checkpoint", "--db", db_.string(), "--json", "--pubkey", pub_.string()});
  EXPECT_EQ(checked.exit_code, 0) << checked.err;
  EXPECT_EQ(nlohmann::json::parse(checked.out), j);
  RawDb(db_).exec("UPDATE checkpoints SET signature = '' WHERE seq = 3");
  CliResult refused = runCli(
      dir_, {"audit", "checkpoint", "--db", db_.string(), "--json", "--pubkey", pub_.string()});
  EXPECT_EQ(refused.exit_code, 1) << refused.out;
  EXPECT_EQ(refused.out, "");
  EXPECT_NE(refused.err.find("the signature does not verify"), std::string::npos) << refused.err;
  auto sig = base64Decode(j["signature"].get<std::string>());
  ASSERT_TRUE(sig.has_value());
  EXPECT_TRUE(PublicKey::fromPem(key_->publicKeyPem(), "t")
                  .value()
                  ->verify(checkpointSignedText(12, j["root"].get<std::string>(),
                                                j["ts"].get<std::int64_t>()),
                           *sig));
}

TEST_F(ConsistencyTest, HonestExtensionIsConsistent) {
  write(db_, 0, 12, key_, 5);
  auto kept = keep(db_, "kept.json");
  write(db_, 12, 30, key_, 7);
  CliResult v = verifyCli(db_, {"--consistent-with", kept.string()});
  EXPECT_EQ(v.exit_code, 0) << v.out << v.err;
  EXPECT_NE(v.out.find("extends the checkpoint kept in " + kept.string()), std::string::npos)
      << v.out;
  // The log exactly at the kept checkpoint extends it too.
  CliResult same = verifyCli(db_, {"--consistent-with", keep(db_, "now.json").string()});
  EXPECT_EQ(same.exit_code, 0) << same.out;
}

// Rows after 9 deleted (and the checkpoints covering them, and chain_head moved back), then the
// log regrown by honest signed runs: on its own it verifies, signed throughout; the checkpoint
// kept at 12 (= subtrees 1..8 and 9..12) shows the history differs from 9..12 on.
TEST_F(ConsistencyTest, TruncatedAndRegrownLogIsCaughtByTheKeptCheckpoint) {
  write(db_, 0, 12, key_, 5);  // checkpoints at 5, 10, 12
  auto kept = keep(db_, "kept.json");
  {
    RawDb raw(db_);
    ASSERT_EQ(raw.exec("DELETE FROM connections WHERE seq > 9; DELETE FROM checkpoints WHERE "
                       "position > 9; UPDATE chain_head SET seq = 9, hash = (SELECT hash FROM "
                       "connections WHERE seq = 9)"),
              "");
  }
  write(db_, 100, 8, key_, 5);  // regrown to 17 rows, with other rows at 10..17
  EXPECT_EQ(verifyCli(db_).exit_code, 0) << "the regrown log is consistent on its own";
  CliResult v = verifyCli(db_, {"--consistent-with", kept.string()});
  EXPECT_EQ(v.exit_code, 1) << v.out << v.err;
  EXPECT_NE(v.out.find("REWRITTEN: history was rewritten at a row in 9..12: rows 1..8 match the "
                       "kept checkpoint seq 3 (position 12)"),
            std::string::npos)
      << v.out;

  // Truncated and not regrown (yet): the rows the kept checkpoint covers are missing.
  write(dir_ / "short.db", 0, 12, key_, 5);
  auto kept_short = keep(dir_ / "short.db", "kept-short.json");
  ASSERT_EQ(RawDb(dir_ / "short.db")
                .exec("DELETE FROM connections WHERE seq > 8; DELETE FROM checkpoints WHERE "
                      "position > 8; UPDATE chain_head SET seq = 8, hash = (SELECT hash FROM "
                      "connections WHERE seq = 8)"),
            "");
  CliResult s = verifyCli(dir_ / "short.db", {"--consistent-with", kept_short.string()});
  EXPECT_EQ(s.exit_code, 1) << s.out;
  EXPECT_NE(s.out.find("the log ends at row 8 but the kept checkpoint seq 3 (position 12) covers "
                       "rows 1..12: rows 9..12 were deleted"),
            std::string::npos)
      << s.out;
}

// The stolen-key case: the attacker rewrites row 10, re-hashes every later row and re-signs
// every checkpoint with the real key. The database verifies with the public key; the checkpoint
// kept before the theft does not match it.
TEST_F(ConsistencyTest, RewrittenRowResignedWithAStolenKeyIsCaughtByTheKeptCheckpoint) {
  write(db_, 0, 13, key_, 5);  // 13 = subtrees 1..8, 9..12 and 13
  auto kept = keep(db_, "kept.json");
  const auto forged = dir_ / "forged.db";
  write(forged, 0, 13, key_, 5, true, /*rewritten=*/9);  // row 10 changed, all re-signed
  EXPECT_NE(RawDb(forged).text("SELECT hash FROM connections WHERE seq = 10"),
            RawDb(db_).text("SELECT hash FROM connections WHERE seq = 10"));
  EXPECT_EQ(verifyCli(forged).exit_code, 0) << "re-signed with the real key, it verifies alone";
  CliResult v = verifyCli(forged, {"--consistent-with", kept.string()});
  EXPECT_EQ(v.exit_code, 1) << v.out << v.err;
  EXPECT_NE(v.out.find("history was rewritten at a row in 9..12: rows 1..8 match"),
            std::string::npos)
      << v.out;
  // Only the last row rewritten: the kept frontier's one-row subtree names it exactly.
  const auto last = dir_ / "last.db";
  write(last, 0, 13, key_, 5, true, /*rewritten=*/12);
  CliResult l = verifyCli(last, {"--consistent-with", kept.string()});
  EXPECT_EQ(l.exit_code, 1) << l.out;
  EXPECT_NE(l.out.find("history was rewritten at row 13: rows 1..12 match"), std::string::npos)
      << l.out;
}

TEST_F(ConsistencyTest, KeptCheckpointMustBeSignedByTheGivenKey) {
  write(db_, 0, 6, key_, 5);
  auto kept = keep(db_, "kept.json");
  auto j = nlohmann::json::parse(testing::slurp(kept));
  // Another key's signature over the same checkpoint.
  auto other = *SigningKey::generate();
  j["key_id"] = other->keyId();
  j["signature"] = base64Encode(
      other->sign(checkpointSignedText(j["position"].get<std::int64_t>(),
                                       j["root"].get<std::string>(), j["ts"].get<std::int64_t>())));
  std::ofstream(dir_ / "other.json") << j.dump();
  CliResult v = verifyCli(db_, {"--consistent-with", (dir_ / "other.json").string()});
  EXPECT_EQ(v.exit_code, 2) << v.out;
  EXPECT_NE(v.err.find((dir_ / "other.json").string() + ": signed by key " + other->keyId()),
            std::string::npos)
      << v.err;
  // An edited root no longer carries a valid signature.
  j = nlohmann::json::parse(testing::slurp(kept));
  j["root"] = std::string(64, 'a');
  std::ofstream(dir_ / "edited.json") << j.dump();
  CliResult e = verifyCli(db_, {"--consistent-with", (dir_ / "edited.json").string()});
  EXPECT_EQ(e.exit_code, 2) << e.out;
  EXPECT_NE(e.err.find("the signature does not verify"), std::string::npos) << e.err;
  // Without --pubkey a kept checkpoint proves nothing: refused.
  CliResult no_key =
      runCli(dir_, {"audit", "verify", "--db", db_.string(), "--consistent-with", kept.string()});
  EXPECT_NE(no_key.exit_code, 0);
  EXPECT_NE(no_key.exit_code, 1);
}

}  // namespace
}  // namespace sluice::audit
