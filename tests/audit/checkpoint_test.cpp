// Signed checkpoints (issue 15): the writer's Merkle tree and signatures, and what
// `verify --pubkey` catches that the hash chain alone cannot (a re-hashed forged history, a
// truncated tail with a rewritten head, a checkpoint signed by another key).
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "audit_test_util.hpp"
#include "sluice/audit/signing.hpp"
#include "sluice/audit/store.hpp"

namespace sluice::audit {
namespace {

using testing::RawDb;
using testing::TempDir;

std::string readFile(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::shared_ptr<const SigningKey> newKey() {
  auto k = SigningKey::generate();
  EXPECT_TRUE(k.has_value());
  return *k;
}

std::shared_ptr<const PublicKey> publicOf(const SigningKey& k) {
  auto p = PublicKey::fromPem(k.publicKeyPem(), "test");
  EXPECT_TRUE(p.has_value()) << p.error().message;
  return *p;
}

/// Writes `rows` connections, one commit each, with a checkpoint every `every` rows.
void writeSigned(const std::filesystem::path& db, std::shared_ptr<const SigningKey> key, int rows,
                 std::size_t every = 5, int first = 0) {
  StoreOptions o;
  o.signing_key = std::move(key);
  o.checkpoint_rows = every;
  auto store = testing::openStore(db, o);
  ASSERT_TRUE(store);
  for (int i = first; i < first + rows; ++i) {
    store->recordConnection(testing::sampleConnection(i));
    ASSERT_TRUE(store->flush().has_value());
  }
}

VerifyResult verifyWith(const std::filesystem::path& db, const PublicKey* key) {
  auto v = verify(db, key);
  EXPECT_TRUE(v.has_value()) << v.error().message;
  return v.value_or(VerifyResult{});
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    key_ = newKey();
    pub_ = publicOf(*key_);
    writeSigned(db_, key_, 12);
  }
  void expectBroken(const std::string& mention) {
    VerifyResult v = verifyWith(db_, pub_.get());
    EXPECT_FALSE(v.ok);
    EXPECT_NE(v.first_broken.find(mention), std::string::npos) << v.first_broken;
  }

  TempDir dir_;
  std::filesystem::path db_ = dir_ / "audit.db";
  std::shared_ptr<const SigningKey> key_;
  std::shared_ptr<const PublicKey> pub_;
};

TEST_F(CheckpointTest, EveryNRowsAndAtCloseAllSignaturesVerify) {
  RawDb raw(db_);
  // Rows 5 and 10 by the row count, 12 at close.
  EXPECT_EQ(raw.text("SELECT group_concat(position, ',') FROM (SELECT position FROM checkpoints "
                     "ORDER BY seq)"),
            "5,10,12");
  EXPECT_EQ(raw.text("SELECT DISTINCT key_id FROM checkpoints"), key_->keyId());
  VerifyResult v = verifyWith(db_, pub_.get());
  EXPECT_TRUE(v.ok) << v.first_broken;
  EXPECT_EQ(v.rows, 12u);
  EXPECT_EQ(v.checkpoints, 3u);
  EXPECT_TRUE(v.signatures_checked);
  EXPECT_EQ(v.last_signed_position, 12);
  EXPECT_EQ(v.unsigned_tail, 0u);
}

TEST_F(CheckpointTest, UnsignedTailIsReported) {
  {
    auto store = testing::openStore(db_);  // no key: rows after the last checkpoint
    ASSERT_TRUE(store);
    store->recordConnection(testing::sampleConnection(50));
    store->recordConnection(testing::sampleConnection(51));
    ASSERT_TRUE(store->flush().has_value());
  }
  VerifyResult v = verifyWith(db_, pub_.get());
  EXPECT_TRUE(v.ok) << v.first_broken;
  EXPECT_EQ(v.last_signed_position, 12);
  EXPECT_EQ(v.unsigned_tail, 2u);
}

// A later signing writer resumes the tree (from the stored frontier) and covers rows another,
// unsigned, writer added meanwhile.
TEST_F(CheckpointTest, ResumedTreeCoversRowsOfOtherWriters) {
  {
    auto plain = testing::openStore(db_);
    ASSERT_TRUE(plain);
    plain->recordConnection(testing::sampleConnection(60));
    ASSERT_TRUE(plain->flush().has_value());
  }
  StoreOptions o;
  o.signing_key = key_;
  o.checkpoint_rows = 1000;
  {
    auto signer = testing::openStore(db_, o);
    ASSERT_TRUE(signer);
    auto plain = testing::openStore(db_);
    ASSERT_TRUE(plain);
    signer->recordConnection(testing::sampleConnection(61));
    ASSERT_TRUE(signer->flush().has_value());
    plain->recordConnection(testing::sampleConnection(62));  // between two of the signer's
    ASSERT_TRUE(plain->flush().has_value());
    signer->recordConnection(testing::sampleConnection(63));
    ASSERT_TRUE(signer->flush().has_value());
  }
  VerifyResult v = verifyWith(db_, pub_.get());
  EXPECT_TRUE(v.ok) << v.first_broken;
  EXPECT_EQ(v.rows, 16u);
  EXPECT_EQ(v.last_signed_position, 16);
}

TEST_F(CheckpointTest, IntervalSignsAnIdleTail) {
  StoreOptions o;
  o.signing_key = key_;
  o.checkpoint_rows = 1'000'000;
  o.checkpoint_interval = std::chrono::milliseconds(20);
  auto store = testing::openStore(db_, o);
  ASSERT_TRUE(store);
  store->recordConnection(testing::sampleConnection(70));
  ASSERT_TRUE(store->flush().has_value());
  // No more rows and the store stays open: the writer signs the tail when the interval passes.
  std::int64_t covered = 0;
  for (int i = 0; i < 1000 && covered != 13; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    covered = RawDb(db_).integer("SELECT max(position) FROM checkpoints");
  }
  EXPECT_EQ(covered, 13);
}

// Producers on several threads, checkpoints every 97 rows signed on the checkpointer's thread
// while the writer goes on: every checkpoint lands at a position it really covers.
TEST(CheckpointConcurrencyTest, ManyProducersManyCheckpointsAllVerify) {
  TempDir dir;
  auto db = dir / "audit.db";
  auto key = newKey();
  StoreOptions o;
  o.signing_key = key;
  o.checkpoint_rows = 97;
  o.batch_rows = 64;
  {
    auto store = testing::openStore(db, o);
    ASSERT_TRUE(store);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < 2000; ++i)
          store->recordConnection(testing::sampleConnection(t * 10000 + i));
      });
    }
    for (auto& th : threads) th.join();
  }
  auto pub = publicOf(*key);
  VerifyResult v = verifyWith(db, pub.get());
  EXPECT_TRUE(v.ok) << v.first_broken;
  EXPECT_EQ(v.rows, 8000u);
  EXPECT_EQ(v.last_signed_position, 8000);
  EXPECT_GE(v.checkpoints, 8000u / 97);
}

TEST_F(CheckpointTest, EditedRowIsCaught) {
  RawDb(db_).exec("UPDATE connections SET host = 'evil.example' WHERE seq = 7");
  expectBroken("connections seq 7");
}

TEST_F(CheckpointTest, DeletedRowIsCaught) {
  RawDb(db_).exec("DELETE FROM connections WHERE seq = 7");
  expectBroken("rows 7..7 are missing");
}

TEST_F(CheckpointTest, ReorderedRowsAreCaught) {
  RawDb(db_).exec(
      "UPDATE connections SET seq = -1 WHERE seq = 3; UPDATE connections SET seq = 3 WHERE seq = "
      "4; UPDATE connections SET seq = 4 WHERE seq = -1");
  expectBroken("connections seq 3");
}

// Truncation with the head rewritten to the new last row: the chain alone accepts it, the
// checkpoint covering the deleted rows does not.
TEST_F(CheckpointTest, TruncatedTailWithRewrittenHeadIsCaughtByACheckpoint) {
  {
    RawDb raw(db_);
    raw.exec("DELETE FROM connections WHERE seq > 9");
    raw.exec("UPDATE chain_head SET seq = 9, hash = (SELECT hash FROM connections WHERE seq = 9)");
  }
  RawDb(db_).exec("DELETE FROM checkpoints WHERE position > 9");
  VerifyResult before = verifyWith(db_, pub_.get());
  EXPECT_TRUE(before.ok) << "only signed checkpoints above 9 can show the truncation";
  EXPECT_EQ(before.last_signed_position, 5);

  TempDir other;
  auto db = other / "audit.db";
  writeSigned(db, key_, 12);
  {
    RawDb raw(db);
    raw.exec("DELETE FROM connections WHERE seq > 9");
    raw.exec("UPDATE chain_head SET seq = 9, hash = (SELECT hash FROM connections WHERE seq = 9)");
  }
  VerifyResult v = verifyWith(db, pub_.get());
  EXPECT_FALSE(v.ok);
  EXPECT_NE(
      v.first_broken.find(
          "checkpoint seq 2 (position 10): covers rows up to seq 10 but the chain ends at seq 9"),
      std::string::npos)
      << v.first_broken;
}

// Whoever can write the file can rebuild a consistent chain (and consistent Merkle roots) for a
// forged history; only the signature, made with a key they do not have, shows it.
TEST_F(CheckpointTest, ForgedRehashedHistoryIsCaughtOnlyByTheSignature) {
  TempDir other;
  auto forged = other / "audit.db";
  auto attacker = newKey();
  {
    StoreOptions o;
    o.signing_key = attacker;
    o.checkpoint_rows = 5;
    auto store = testing::openStore(forged, o);
    ASSERT_TRUE(store);
    for (int i = 0; i < 12; ++i) {
      auto c = testing::sampleConnection(i);
      if (i == 6) c.host = "exfil.example";  // the edit being hidden
      store->recordConnection(c);
      ASSERT_TRUE(store->flush().has_value());
    }
  }
  // The attacker claims the real key's id on their checkpoints.
  RawDb(forged).exec("UPDATE checkpoints SET key_id = '" + key_->keyId() + "'");
  VerifyResult chain_only = verifyWith(forged, nullptr);
  EXPECT_TRUE(chain_only.ok) << chain_only.first_broken;  // chain and roots are consistent
  VerifyResult v = verifyWith(forged, pub_.get());
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.first_broken.find("checkpoint seq 1 (position 5): the signature does not verify"),
            std::string::npos)
      << v.first_broken;
}

TEST_F(CheckpointTest, CheckpointSignedByAnotherKeyIsCaught) {
  auto other = newKey();
  RawDb raw(db_);
  const std::string root = raw.text("SELECT root FROM checkpoints WHERE seq = 2");
  const std::int64_t ts = raw.integer("SELECT ts FROM checkpoints WHERE seq = 2");
  const std::string sig = base64Encode(other->sign(checkpointSignedText(10, root, ts)));
  raw.exec("UPDATE checkpoints SET signature = '" + sig + "', key_id = '" + other->keyId() +
           "' WHERE seq = 2");
  expectBroken("checkpoint seq 2 (position 10): signed by key " + other->keyId());
  // Keeping the real key's id does not help.
  raw.exec("UPDATE checkpoints SET key_id = '" + key_->keyId() + "' WHERE seq = 2");
  expectBroken("checkpoint seq 2 (position 10): the signature does not verify");
  // Without a public key the roots still match: only the key tells who signed.
  EXPECT_TRUE(verifyWith(db_, nullptr).ok);
}

TEST_F(CheckpointTest, EditedCheckpointRootIsCaught) {
  RawDb(db_).exec("UPDATE checkpoints SET root = '" + std::string(64, 'a') + "' WHERE seq = 1");
  expectBroken("checkpoint seq 1 (position 5): its root is not the Merkle root of rows 1..5");
}

// Keys: files, modes, ownership, id.
TEST(SigningKeyTest, KeygenWritesPrivateKeyAndRefusesToOverwrite) {
  TempDir dir;
  auto out = dir / "keys";
  auto id = generateKeyFiles(out);
  ASSERT_TRUE(id.has_value()) << id.error().message;
  struct stat st {};
  ASSERT_EQ(::stat((out / "audit.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto key = SigningKey::load(out / "audit.key");
  ASSERT_TRUE(key.has_value()) << key.error().message;
  auto pub = PublicKey::load(out / "audit.pub");
  ASSERT_TRUE(pub.has_value()) << pub.error().message;
  EXPECT_EQ((*key)->keyId(), *id);
  EXPECT_EQ((*pub)->keyId(), *id);
  // key id = SHA-256 of the raw 32-byte public key, computed here independently.
  std::string pem = readFile(out / "audit.pub");
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  EVP_PKEY* k = PEM_read_bio_PUBKEY(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  ASSERT_NE(k, nullptr);
  unsigned char raw[32];
  std::size_t len = sizeof raw;
  ASSERT_EQ(EVP_PKEY_get_raw_public_key(k, raw, &len), 1);
  EVP_PKEY_free(k);
  EXPECT_EQ(*id, testing::sha256Hex(std::string(reinterpret_cast<char*>(raw), len)));

  std::string before = readFile(out / "audit.key");
  auto again = generateKeyFiles(out);
  ASSERT_FALSE(again.has_value());
  EXPECT_NE(again.error().message.find("already exists"), std::string::npos);
  EXPECT_EQ(readFile(out / "audit.key"), before);
}

TEST(SigningKeyTest, KeyReadableByOthersIsRefusedNamingTheFile) {
  TempDir dir;
  ASSERT_TRUE(generateKeyFiles(dir.path()).has_value());
  auto file = dir / "audit.key";
  for (mode_t mode : {0640, 0604, 0620}) {
    ASSERT_EQ(::chmod(file.c_str(), mode), 0);
    auto key = SigningKey::load(file);
    ASSERT_FALSE(key.has_value()) << std::oct << mode;
    EXPECT_NE(key.error().message.find(file.string()), std::string::npos) << key.error().message;
    EXPECT_NE(key.error().message.find("chmod 600"), std::string::npos) << key.error().message;
  }
}

TEST(SigningKeyTest, KeyOwnedByAnotherUserIsRefused) {
  if (::geteuid() != 0) SLUICE_SKIP_OR_FAIL("needs root to give the key file to another user");
  TempDir dir;
  ASSERT_TRUE(generateKeyFiles(dir.path()).has_value());
  auto file = dir / "audit.key";
  ASSERT_EQ(::chown(file.c_str(), 65534, 65534), 0);
  auto key = SigningKey::load(file);
  ASSERT_FALSE(key.has_value());
  EXPECT_NE(key.error().message.find("owned by uid 65534"), std::string::npos)
      << key.error().message;
}

TEST(SigningKeyTest, PublicKeyIsNotAPrivateKey) {
  TempDir dir;
  ASSERT_TRUE(generateKeyFiles(dir.path()).has_value());
  ASSERT_EQ(::chmod((dir / "audit.pub").c_str(), 0600), 0);
  auto key = SigningKey::load(dir / "audit.pub");
  ASSERT_FALSE(key.has_value());
  EXPECT_NE(key.error().message.find("not a PEM private key"), std::string::npos)
      << key.error().message;
}

// The private key's bytes (PEM text, its base64 body, and the raw 32-byte seed) appear nowhere
// in the database, its WAL or its shared-memory file.
TEST(SigningKeyTest, PrivateKeyNeverEntersTheDatabase) {
  TempDir dir;
  ASSERT_TRUE(generateKeyFiles(dir.path()).has_value());
  auto key = SigningKey::load(dir / "audit.key");
  ASSERT_TRUE(key.has_value());
  auto db = dir / "audit.db";
  StoreOptions o;
  o.signing_key = *key;
  o.checkpoint_rows = 2;
  o.checkpoint_on_close = false;  // keep rows in the WAL too
  {
    auto store = testing::openStore(db, o);
    ASSERT_TRUE(store);
    for (int i = 0; i < 6; ++i) {
      store->recordConnection(testing::sampleConnection(i));
      ASSERT_TRUE(store->flush().has_value());
    }
  }
  ASSERT_GT(RawDb(db).integer("SELECT count(*) FROM checkpoints"), 1);
  const std::string pem = readFile(dir / "audit.key");
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  EVP_PKEY* k = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  ASSERT_NE(k, nullptr);
  unsigned char seed[32];
  std::size_t len = sizeof seed;
  ASSERT_EQ(EVP_PKEY_get_raw_private_key(k, seed, &len), 1);
  EVP_PKEY_free(k);
  const std::string raw(reinterpret_cast<char*>(seed), len);
  std::string body = pem.substr(pem.find('\n') + 1);
  body = body.substr(0, body.find('\n'));
  ASSERT_GT(body.size(), 40u);
  std::string all;
  for (std::string suffix : {"", "-wal", "-shm"}) all += readFile(db.string() + suffix);
  ASSERT_GT(all.size(), 4096u);
  EXPECT_EQ(all.find(raw), std::string::npos);
  EXPECT_EQ(all.find(body), std::string::npos);
  EXPECT_EQ(all.find("PRIVATE KEY"), std::string::npos);
  EXPECT_EQ(all.find(base64Encode(raw)), std::string::npos);
}

TEST(SigningKeyTest, Base64RoundTripsAndRejectsJunk) {
  for (const std::string& s :
       std::vector<std::string>{"", "a", "ab", "abc", "abcd", std::string("\0\xff\x10", 3)}) {
    auto d = base64Decode(base64Encode(s));
    ASSERT_TRUE(d.has_value()) << s;
    EXPECT_EQ(*d, s);
  }
  EXPECT_FALSE(base64Decode("abc").has_value());
  EXPECT_FALSE(base64Decode("ab=c").has_value());
  EXPECT_FALSE(base64Decode("YQ==\n").has_value());
}

}  // namespace
}  // namespace sluice::audit
