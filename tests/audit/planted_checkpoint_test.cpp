// Issue 21 item 1: a checkpoint planted by someone who can write the database but holds no key
// is never extended and signed. The attack: a checkpoints row whose tree starts with a row taken
// from another log (its frontier folding to its root, so the old store resumed from it); the
// next writer holding the key signed the extended tree, and `check-proof` then accepted a proof
// for a receipt that was never in this log. Now the store refuses to write (naming the
// checkpoint and `audit verify`), nothing is signed over the planted tree, and the forged proof
// is rejected.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "audit_test_util.hpp"
#include "chain_rows.hpp"
#include "merkle.hpp"
#include "sluice/audit/evidence.hpp"
#include "sluice/audit/signing.hpp"
#include "sluice/audit/store.hpp"

namespace sluice::audit {
namespace {

using testing::RawDb;
using testing::TempDir;

/// The planted checkpoints row: unsigned, claiming the store's key with a signature that is not
/// its own, or properly signed by the attacker's key.
enum class Plant { kUnsigned, kClaimsTheStoresKey, kSignedByAnotherKey };

/// The chain hashes of rows 1..position, in seq order.
std::vector<detail::Digest> rowHashes(const std::filesystem::path& db, std::int64_t position) {
  RawDb raw(db);
  sqlite3_stmt* s = nullptr;
  std::string sql = detail::chainHashesSql("seq <= " + std::to_string(position));
  EXPECT_EQ(sqlite3_prepare_v2(raw.get(), sql.c_str(), -1, &s, nullptr), SQLITE_OK);
  std::vector<detail::Digest> out;
  while (sqlite3_step(s) == SQLITE_ROW)
    out.push_back(*detail::fromHex(reinterpret_cast<const char*>(sqlite3_column_text(s, 1))));
  sqlite3_finalize(s);
  return out;
}

/// Copies the newest checkpoint of the database `from` into `into` as its row at `position`,
/// as someone able to write `into` would plant it. Returns "" or SQLite's error.
std::string plantNewestCheckpoint(const std::filesystem::path& from,
                                  const std::filesystem::path& into, int position) {
  RawDb src(from);
  auto col = [&](const std::string& c) {
    return src.text("SELECT " + c + " FROM checkpoints ORDER BY seq DESC LIMIT 1");
  };
  return RawDb(into).exec(
      "INSERT INTO checkpoints (position, root, signature, key_id, ts, frontier) VALUES (" +
      std::to_string(position) + ", '" + col("root") + "', '" + col("signature") + "', '" +
      col("key_id") + "', " + col("ts") + ", '" + col("frontier") + "')");
}

class PlantedCheckpointTest : public ::testing::TestWithParam<Plant> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(keys_.key && keys_.pub);
    StoreOptions o = keys_.options();
    o.checkpoint_rows = 5;
    // This log: 12 rows, signed (checkpoints at 5, 10, 12).
    {
      auto store = testing::openStore(db_, o);
      ASSERT_TRUE(store);
      for (int i = 0; i < 11; ++i) store->recordConnection(testing::sampleConnection(i));
      ASSERT_TRUE(store->recordExecution(testing::sampleExecution("exec-here")).has_value());
    }
    // Another log, with the receipt the attacker wants to pass off as this log's (seq 1).
    o.signing_key = *SigningKey::generate();
    {
      auto store = testing::openStore(foreign_db_, o);
      ASSERT_TRUE(store);
      ASSERT_TRUE(store->recordExecution(testing::sampleExecution("exec-never-here")).has_value());
    }
    auto proof = proveExecution(foreign_db_, "exec-never-here");
    ASSERT_TRUE(proof.has_value()) << proof.error().message;
    foreign_row_ = nlohmann::ordered_json::parse(*proof)["row"];
  }

  /// The attacker's tree: the foreign row as leaf 0, then this log's rows 2..n.
  std::vector<detail::Digest> forgedLeaves(std::int64_t n) {
    std::vector<detail::Digest> leaves;
    leaves.push_back(detail::leafHash(*detail::fromHex(foreign_row_["hash"].get<std::string>())));
    auto rows = rowHashes(db_, n);
    for (std::size_t i = 1; i < rows.size(); ++i) leaves.push_back(detail::leafHash(rows[i]));
    return leaves;
  }

  /// Inserts the planted checkpoint over this log's 12 rows; returns its seq.
  std::int64_t plant(Plant how) {
    detail::MerkleFrontier tree;
    for (const auto& leaf : forgedLeaves(12)) tree.appendLeaf(leaf);
    const std::string root = detail::toHex(tree.root());
    const std::int64_t ts = 1'800'000'000'000;
    std::string signature, key_id;
    if (how == Plant::kClaimsTheStoresKey) {
      key_id = keys_.key->keyId();
      // A real signature of this key, replayed from the genuine checkpoint at the same position.
      signature = RawDb(db_).text("SELECT signature FROM checkpoints WHERE position = 12");
    } else if (how == Plant::kSignedByAnotherKey) {
      auto attacker = *SigningKey::generate();
      key_id = attacker->keyId();
      signature = base64Encode(attacker->sign(checkpointSignedText(12, root, ts)));
    }
    RawDb raw(db_);
    EXPECT_EQ(raw.exec("INSERT INTO checkpoints (position, root, signature, key_id, ts, frontier) "
                       "VALUES (12, '" +
                       root + "', '" + signature + "', '" + key_id + "', " + std::to_string(ts) +
                       ", '" + tree.serialize() + "')"),
              "");
    return raw.integer("SELECT max(seq) FROM checkpoints");
  }

  /// The proof the attacker builds for the foreign row against the newest checkpoint.
  std::string forgedProof() {
    RawDb raw(db_);
    const std::int64_t position =
        raw.integer("SELECT position FROM checkpoints ORDER BY position DESC, seq DESC LIMIT 1");
    nlohmann::ordered_json cp;
    cp["seq"] = raw.integer("SELECT seq FROM checkpoints ORDER BY position DESC, seq DESC LIMIT 1");
    cp["position"] = position;
    for (std::string col : {"root", "ts", "key_id", "signature"}) {
      std::string v =
          raw.text("SELECT " + col + " FROM checkpoints ORDER BY position DESC, seq DESC LIMIT 1");
      if (col == "ts") {
        cp[col] = std::stoll(v);
      } else {
        cp[col] = v;
      }
    }
    nlohmann::ordered_json path = nlohmann::ordered_json::array();
    for (const auto& d : detail::inclusionPath(forgedLeaves(position), 0))
      path.push_back(detail::toHex(d));
    nlohmann::ordered_json p;
    p["type"] = "sluice-inclusion-proof/v1";
    p["row"] = foreign_row_;
    p["leaf_index"] = 0;
    p["tree_size"] = position;
    p["audit_path"] = path;
    p["checkpoint"] = cp;
    return p.dump();
  }

  TempDir dir_;
  std::filesystem::path db_ = dir_ / "audit.db";
  std::filesystem::path foreign_db_ = dir_ / "foreign.db";
  const testing::TestKeys keys_ = testing::generateKeys();
  nlohmann::ordered_json foreign_row_;
};

TEST_P(PlantedCheckpointTest, StoreRefusesToSignOverItAndTheForgedProofIsRejected) {
  const std::int64_t planted = plant(GetParam());
  const std::int64_t checkpoints_before = RawDb(db_).integer("SELECT count(*) FROM checkpoints");
  const std::int64_t head_before = RawDb(db_).integer("SELECT seq FROM chain_head");

  // The next writer holding the key.
  StoreOptions o;
  o.signing_key = keys_.key;
  auto store = Store::open(db_, o);
  if (store) {  // the old behaviour: it extends the planted tree and signs it at close
    (*store)->recordConnection(testing::sampleConnection(100));
    EXPECT_TRUE((*store)->flush().has_value());
    store->reset();
  }
  EXPECT_FALSE(store.has_value()) << "a store opened over a planted checkpoint";
  const std::string why = store ? "" : store.error().message;
  EXPECT_NE(why.find("checkpoint seq " + std::to_string(planted) + " (position 12)"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("sluice audit verify"), std::string::npos) << why;
  EXPECT_NE(why.find(GetParam() == Plant::kUnsigned             ? "is not signed"
                     : GetParam() == Plant::kClaimsTheStoresKey ? "does not verify"
                                                                : "is signed by key"),
            std::string::npos)
      << why;

  // Nothing written, nothing signed over the planted tree.
  EXPECT_EQ(RawDb(db_).integer("SELECT count(*) FROM checkpoints"), checkpoints_before);
  EXPECT_EQ(RawDb(db_).integer("SELECT seq FROM chain_head"), head_before);
  // The forged proof of the foreign receipt against the newest checkpoint is rejected.
  ProofCheck c = checkProof(forgedProof(), *keys_.pub);
  EXPECT_FALSE(c.ok) << "a receipt that was never in this log was proven";
  // verify names the planted checkpoint too.
  auto v = verify(db_, keys_.pub.get());
  ASSERT_TRUE(v.has_value());
  EXPECT_FALSE(v->ok);
}

INSTANTIATE_TEST_SUITE_P(Plants, PlantedCheckpointTest,
                         ::testing::Values(Plant::kUnsigned, Plant::kClaimsTheStoresKey,
                                           Plant::kSignedByAnotherKey),
                         [](const auto& info) {
                           switch (info.param) {
                             case Plant::kUnsigned:
                               return std::string("Unsigned");
                             case Plant::kClaimsTheStoresKey:
                               return std::string("ClaimsTheStoresKey");
                             default:
                               return std::string("SignedByAnotherKey");
                           }
                         });

// A genuine checkpoint of another log signed by the same key (one key shared by two logs) is
// not this log's tree: its last leaves are not this database's rows, so it is refused too.
TEST(PlantedCheckpointSameKeyTest, CheckpointCopiedFromAnotherLogOfTheSameKeyIsRefused) {
  TempDir dir;
  auto key = *SigningKey::generate();
  StoreOptions o;
  o.signing_key = key;
  o.checkpoint_rows = 1000;
  for (const char* name : {"a.db", "b.db"}) {
    auto store = testing::openStore(dir / name, o);
    ASSERT_TRUE(store);
    for (int i = 0; i < 7; ++i)
      store->recordConnection(testing::sampleConnection(i, std::string("exec-") + name));
  }
  // b's checkpoint (position 7) planted into a, as a's newest.
  ASSERT_EQ(plantNewestCheckpoint(dir / "b.db", dir / "a.db", 7), "");
  auto store = Store::open(dir / "a.db", o);
  ASSERT_FALSE(store.has_value());
  EXPECT_NE(store.error().message.find("checkpoint seq 2 (position 7) does not match this "
                                       "database's rows 7..7"),
            std::string::npos)
      << store.error().message;

  // At a power of two the check extends the previous checkpoint by the rows after it: c holds
  // its own checkpoints at 4 and 8, d's at 8 is planted over them.
  for (const char* name : {"c.db", "d.db"}) {
    for (int session = 0; session < 2; ++session) {
      auto s = testing::openStore(dir / name, o);
      ASSERT_TRUE(s);
      for (int i = 0; i < 4; ++i)
        s->recordConnection(testing::sampleConnection(session * 4 + i, std::string("e-") + name));
    }
  }
  ASSERT_EQ(plantNewestCheckpoint(dir / "d.db", dir / "c.db", 8), "");
  store = Store::open(dir / "c.db", o);
  ASSERT_FALSE(store.has_value());
  EXPECT_NE(store.error().message.find("checkpoint seq 3 (position 8) does not match this "
                                       "database's rows 5..8"),
            std::string::npos)
      << store.error().message;
}

// The honest case stays cheap and works: a store resumes from its own checkpoint at every
// position shape (odd, a power of two, a sum of several) and keeps signing.
TEST(PlantedCheckpointSameKeyTest, OwnCheckpointsAreResumedAtEveryPositionShape) {
  TempDir dir;
  auto keys = testing::generateKeys();
  ASSERT_TRUE(keys.key && keys.pub);
  StoreOptions o = keys.options();
  o.checkpoint_rows = 1000;
  int n = 0;
  for (int rows : {1, 1, 2, 4, 5, 3}) {  // closes at 1, 2, 4, 8, 13, 16
    auto store = testing::openStore(dir / "audit.db", o);
    ASSERT_TRUE(store) << "after " << n << " rows";
    for (int i = 0; i < rows; ++i) store->recordConnection(testing::sampleConnection(n++));
  }
  auto v = verify(dir / "audit.db", keys.pub.get());
  ASSERT_TRUE(v.has_value());
  EXPECT_TRUE(v->ok) << v->first_broken;
  EXPECT_EQ(v->checkpoints, 6u);
  EXPECT_EQ(v->last_signed_position, 16);
}

// As a user meets it: `sluice run --signing-key` over a store with a planted checkpoint refuses
// to run (exit 125), names the checkpoint and `audit verify`, and writes nothing.
TEST(PlantedCheckpointCmdTest, SignedRunRefusesAPlantedCheckpointAndWritesNothing) {
  if (::geteuid() != 0) SLUICE_SKIP_OR_FAIL("sluice run needs root for its sandbox here");
  TempDir dir;
  const auto db = dir / "audit.db";
  const auto policy = dir / "policy.yaml";
  std::ofstream(policy) << "apiVersion: sluice/v1\nkind: Workflow\nname: planted\n";
  ASSERT_EQ(testing::runCli(dir, {"audit", "keygen", "--out", (dir / "keys").string()}).exit_code,
            0);
  auto run = [&] {
    return testing::runCli(
        dir, {"run", "--policy", policy.string(), "--audit", db.string(), "--signing-key",
              (dir / "keys" / "audit.key").string(), "--", "true"});
  };
  auto first = run();
  ASSERT_EQ(first.exit_code, 0) << first.err;
  {
    RawDb raw(db);
    // A copy of the genuine checkpoint with the signature stripped: its frontier folds to its
    // root, which is all the store used to check.
    ASSERT_EQ(raw.exec("INSERT INTO checkpoints (position, root, signature, key_id, ts, frontier) "
                       "SELECT position, root, '', '', ts, frontier FROM checkpoints"),
              "");
  }
  const std::int64_t planted = RawDb(db).integer("SELECT max(seq) FROM checkpoints");
  const std::int64_t position = RawDb(db).integer("SELECT max(position) FROM checkpoints");
  auto second = run();
  EXPECT_EQ(second.exit_code, 125) << second.err;
  EXPECT_NE(second.err.find("checkpoint seq " + std::to_string(planted) + " (position " +
                            std::to_string(position) + ") is not signed"),
            std::string::npos)
      << second.err;
  EXPECT_NE(second.err.find("sluice audit verify"), std::string::npos) << second.err;
  EXPECT_EQ(RawDb(db).integer("SELECT count(*) FROM executions"), 1);
  EXPECT_EQ(RawDb(db).integer("SELECT count(*) FROM checkpoints"), planted);
}

}  // namespace
}  // namespace sluice::audit
