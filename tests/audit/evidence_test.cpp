// Evidence that leaves the box (issue 15): the export stream and its verification from the
// stream alone, inclusion proofs checked without the database, and DSSE-signed SLSA
// provenance. Each tampering case must be rejected.
#include "sluice/audit/evidence.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "audit_test_util.hpp"
#include "sluice/audit/signing.hpp"

namespace sluice::audit {
namespace {

using Json = nlohmann::ordered_json;
using testing::RawDb;
using testing::TempDir;

const std::string kArtifactSha(64, 'b');

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

std::string joinLines(const std::vector<std::string>& ls) {
  std::string s;
  for (const auto& l : ls) s += l + "\n";
  return s;
}

class EvidenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(keys_.key && keys_.pub);
    StoreOptions o = keys_.options();
    o.checkpoint_rows = 4;
    auto store = testing::openStore(db_, o);
    ASSERT_TRUE(store);
    for (int i = 0; i < 3; ++i) {
      store->recordConnection(testing::sampleConnection(i, "exec-1"));
      store->recordForward(testing::sampleForward(i, "exec-1"));
      store->recordRequest(testing::sampleRequest(i, "exec-1"));
      ASSERT_TRUE(store->flush().has_value());
    }
    store->recordDns(testing::sampleDns(1, "exec-1"));
    store->recordApproval(testing::sampleApproval(0, "exec-1"));
    auto e = testing::sampleExecution("exec-1");
    e.artifacts_json = R"([{"path":"report.csv","bytes":12,"sha256":")" + kArtifactSha + R"("}])";
    ASSERT_TRUE(store->recordExecution(e).has_value());
    store->recordConnection(testing::sampleConnection(9, "exec-2"));
    ASSERT_TRUE(store->flush().has_value());
  }

  std::string exportText(ExportOptions o = {}) {
    std::ostringstream out;
    auto stats = exportChain(db_, o, out);
    EXPECT_TRUE(stats.has_value()) << stats.error().message;
    return out.str();
  }
  ExportVerifyResult verifyText(const std::string& text, const PublicKey* key) {
    std::istringstream in(text);
    return verifyExport(in, key);
  }

  TempDir dir_;
  std::filesystem::path db_ = dir_ / "audit.db";
  const testing::TestKeys keys_ = testing::generateKeys();
};

// Export, then re-verify the whole chain and every signature from the export alone.
TEST_F(EvidenceTest, ExportReverifiesFromTheStreamAlone) {
  std::string text = exportText();
  auto v = verify(db_, keys_.pub.get());
  ASSERT_TRUE(v.has_value());
  ASSERT_TRUE(v->ok) << v->first_broken;
  ExportVerifyResult r = verifyText(text, keys_.pub.get());
  EXPECT_TRUE(r.ok) << r.first_broken;
  EXPECT_EQ(r.rows, v->rows);
  EXPECT_EQ(r.checkpoints, v->checkpoints);
  EXPECT_TRUE(r.roots_checked);
  EXPECT_EQ(r.first_seq, 1);
  EXPECT_EQ(r.last_signed_position, static_cast<std::int64_t>(v->rows));
  // Every table shows up, each checkpoint right after the row at its position.
  std::set<std::string> tables;
  std::int64_t last_seq = 0;
  for (const auto& l : lines(text)) {
    Json j = Json::parse(l);
    if (j["type"] == "row") {
      tables.insert(j["table"].get<std::string>());
      last_seq = j["seq"].get<std::int64_t>();
      EXPECT_TRUE(j.contains("time"));
    } else {
      EXPECT_EQ(j["position"].get<std::int64_t>(), last_seq);
    }
  }
  EXPECT_EQ(tables, (std::set<std::string>{"connections", "forwards", "requests", "dns_queries",
                                           "approvals", "executions"}));
}

TEST_F(EvidenceTest, EditedExportLineIsCaught) {
  auto ls = lines(exportText());
  ASSERT_NE(ls[2].find("stats.internal.example"), std::string::npos) << ls[2];
  ls[2].replace(ls[2].find("stats.internal.example"), 22, "stats.internal.exampl3");
  ExportVerifyResult r = verifyText(joinLines(ls), nullptr);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.first_broken.find("line 3 (requests seq 3): hash does not match"), std::string::npos)
      << r.first_broken;
}

TEST_F(EvidenceTest, DeletedOrReorderedExportLinesAreCaught) {
  auto ls = lines(exportText());
  auto deleted = ls;
  deleted.erase(deleted.begin() + 1);
  EXPECT_FALSE(verifyText(joinLines(deleted), nullptr).ok);
  auto swapped = ls;
  std::swap(swapped[1], swapped[2]);
  ExportVerifyResult r = verifyText(joinLines(swapped), nullptr);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.first_broken.find("line 2"), std::string::npos) << r.first_broken;
  // Dropping the tail with its checkpoints still verifies the part that is there, but its
  // last signed position shows how much was covered.
  auto truncated = ls;
  truncated.resize(3);
  ExportVerifyResult t = verifyText(joinLines(truncated), keys_.pub.get());
  EXPECT_TRUE(t.ok) << t.first_broken;
  EXPECT_EQ(t.last_seq, 3);
}

TEST_F(EvidenceTest, ExportedCheckpointByAnotherKeyIsCaught) {
  auto other = *SigningKey::generate();
  auto ls = lines(exportText());
  for (auto& l : ls) {
    Json j = Json::parse(l);
    if (j["type"] != "checkpoint") continue;
    j["signature"] = base64Encode(other->sign(
        checkpointSignedText(j["position"].get<std::int64_t>(), j["root"].get<std::string>(),
                             j["ts"].get<std::int64_t>())));
    l = j.dump();
    break;
  }
  EXPECT_TRUE(verifyText(joinLines(ls), nullptr).ok);  // no key: the roots still agree
  ExportVerifyResult r = verifyText(joinLines(ls), keys_.pub.get());
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.first_broken.find("the signature does not verify"), std::string::npos)
      << r.first_broken;
}

// --after-seq resumes exactly where the previous export stopped; the piece verifies on its own
// (anchored at its first row; signatures checked, roots need the rows before it).
TEST_F(EvidenceTest, AfterSeqResumesAndSinceStartsAtTheFirstRowThatRecent) {
  std::string all = exportText();
  ExportOptions o;
  o.after_seq = 5;
  std::string rest = exportText(o);
  std::vector<std::string> expected;
  for (const auto& l : lines(all)) {
    Json j = Json::parse(l);
    std::int64_t at =
        j["type"] == "row" ? j["seq"].get<std::int64_t>() : j["position"].get<std::int64_t>();
    if (at > 5) expected.push_back(l);
  }
  EXPECT_EQ(lines(rest), expected);
  ExportVerifyResult r = verifyText(rest, keys_.pub.get());
  EXPECT_TRUE(r.ok) << r.first_broken;
  EXPECT_EQ(r.first_seq, 6);
  EXPECT_FALSE(r.roots_checked);
  EXPECT_GT(r.last_signed_position, 5);

  ExportOptions s;
  s.since_ms = 1'763'700'000'000 + 2;  // sampleConnection(2)'s ts: seq 7
  auto since = lines(exportText(s));
  ASSERT_FALSE(since.empty());
  EXPECT_EQ(Json::parse(since[0])["seq"], 7);
}

TEST_F(EvidenceTest, CsvHasOneLinePerRowAndCheckpoint) {
  ExportOptions o;
  o.format = ExportFormat::kCsv;
  auto csv = lines(exportText(o));
  auto jsonl = lines(exportText());
  ASSERT_EQ(csv.size(), jsonl.size() + 1);
  EXPECT_EQ(csv[0], "type,table,seq,time,prev_hash,hash,data\r");
  EXPECT_EQ(csv[1].rfind("row,connections,1,", 0), 0u) << csv[1];
  EXPECT_NE(csv[1].find(",\"{\"\"id\"\":\"\"c-exec-1-0\"\""), std::string::npos) << csv[1];
}

std::string proofOf(const std::filesystem::path& db, const std::string& id) {
  auto p = proveExecution(db, id);
  EXPECT_TRUE(p.has_value()) << p.error().message;
  return p.value_or("");
}

TEST_F(EvidenceTest, ProofVerifiesWithoutTheDatabase) {
  std::string proof = proofOf(db_, "exec-1");
  std::filesystem::remove(db_);
  ProofCheck c = checkProof(proof, *keys_.pub);
  EXPECT_TRUE(c.ok) << c.reason;
  EXPECT_EQ(c.execution_id, "exec-1");
  EXPECT_EQ(c.seq, 12);
  EXPECT_EQ(c.position, 13);
}

TEST_F(EvidenceTest, TamperedProofsAreRejected) {
  Json good = Json::parse(proofOf(db_, "exec-1"));
  auto rejected = [&](const Json& p, const std::string& why) {
    ProofCheck c = checkProof(p.dump(), *keys_.pub);
    EXPECT_FALSE(c.ok);
    EXPECT_NE(c.reason.find(why), std::string::npos) << c.reason;
  };
  Json receipt = good;
  receipt["row"]["columns"]["receipt"] = R"({"execution_id":"exec-1","workflow":"other"})";
  rejected(receipt, "row: its hash does not match its columns");
  Json exit_code = good;
  exit_code["row"]["columns"]["exit_code"] = 1;
  rejected(exit_code, "row: its hash does not match its columns");
  Json path = good;
  ASSERT_FALSE(path["audit_path"].empty());
  std::string h = path["audit_path"][0];
  h[0] = h[0] == '0' ? '1' : '0';
  path["audit_path"][0] = h;
  rejected(path, "audit_path: does not lead");
  Json root = good;
  root["checkpoint"]["root"] = std::string(64, 'c');
  rejected(root, "audit_path: does not lead");
  Json sig = good;
  std::string s = sig["checkpoint"]["signature"];
  s[5] = s[5] == 'A' ? 'B' : 'A';
  sig["checkpoint"]["signature"] = s;
  rejected(sig, "checkpoint: the signature does not verify");
  Json ts = good;
  ts["checkpoint"]["ts"] = ts["checkpoint"]["ts"].get<std::int64_t>() + 1;
  rejected(ts, "checkpoint: the signature does not verify");
  auto other = *PublicKey::fromPem((*SigningKey::generate())->publicKeyPem(), "other");
  ProofCheck c = checkProof(good.dump(), *other);
  EXPECT_FALSE(c.ok);
  EXPECT_NE(c.reason.find("not by the given key"), std::string::npos) << c.reason;
}

// prove reads the rows up to the checkpoint in one pass and refuses rows that are not the ones
// signed: a changed hash, a missing row in the middle or at the end.
TEST_F(EvidenceTest, ProveRefusesRowsThatDoNotMatchTheCheckpoint) {
  auto refused = [&](const std::string& why) {
    auto p = proveExecution(db_, "exec-1");
    ASSERT_FALSE(p.has_value());
    EXPECT_NE(p.error().message.find(why), std::string::npos) << p.error().message;
  };
  RawDb raw(db_);
  const std::string hash = raw.text("SELECT hash FROM connections WHERE seq = 1");
  ASSERT_EQ(raw.exec("UPDATE connections SET hash = '" + std::string(64, 'd') + "' WHERE seq = 1"),
            "");
  refused("rows 1..13 do not match checkpoint seq");
  ASSERT_EQ(raw.exec("UPDATE connections SET hash = '" + hash + "' WHERE seq = 1"), "");
  ASSERT_TRUE(proveExecution(db_, "exec-1").has_value());
  ASSERT_EQ(raw.exec("DELETE FROM connections WHERE seq = 13"), "");
  refused("the chain ends at seq 12 but the checkpoint covers 13");
  ASSERT_EQ(raw.exec("DELETE FROM forwards WHERE seq = 5"), "");
  refused("the chain is broken at seq 5");
}

TEST(EvidenceProveTest, ExecutionWithoutACheckpointHasNoProof) {
  TempDir dir;
  auto db = dir / "audit.db";
  testing::populate(db);  // no signing key
  auto p = proveExecution(db, "exec-1");
  ASSERT_FALSE(p.has_value());
  EXPECT_NE(p.error().message.find("not covered by a signed checkpoint"), std::string::npos)
      << p.error().message;
  auto none = proveExecution(db, "nope");
  ASSERT_FALSE(none.has_value());
  EXPECT_NE(none.error().message.find("no execution with id 'nope'"), std::string::npos);
}

Json statementOf(const Json& envelope) {
  return Json::parse(*base64Decode(envelope["payload"].get<std::string>()));
}

TEST_F(EvidenceTest, AttestationNamesOutputsPolicyAndFetchedUrls) {
  auto env = attestExecution(db_, "exec-1", *keys_.key);
  ASSERT_TRUE(env.has_value()) << env.error().message;
  AttestationCheck c = verifyAttestation(*env, *keys_.pub);
  ASSERT_TRUE(c.ok) << c.reason;
  ASSERT_EQ(c.subjects.size(), 1u);
  EXPECT_EQ(c.subjects[0].first, "report.csv");
  EXPECT_EQ(c.subjects[0].second, kArtifactSha);
  Json envelope = Json::parse(*env);
  EXPECT_EQ(envelope["payloadType"], "application/vnd.in-toto+json");
  Json st = statementOf(envelope);
  EXPECT_EQ(st["_type"], "https://in-toto.io/Statement/v1");
  EXPECT_EQ(st["predicateType"], "https://slsa.dev/provenance/v1");
  const Json& deps = st["predicate"]["buildDefinition"]["resolvedDependencies"];
  ASSERT_EQ(deps.size(), 2u) << deps.dump();  // the policy, and one URL (three identical GETs)
  EXPECT_EQ(deps[0]["digest"]["sha256"], std::string(64, 'a'));
  EXPECT_EQ(deps[1]["uri"], "https://stats.internal.example/v1/items");
  EXPECT_EQ(deps[1]["annotations"]["method"], "GET");
  EXPECT_EQ(st["predicate"]["runDetails"]["metadata"]["invocationId"], "exec-1");
  // The signature is over DSSE's PAE of exactly the payload bytes.
  std::string payload = *base64Decode(envelope["payload"].get<std::string>());
  std::string sig = *base64Decode(envelope["signatures"][0]["sig"].get<std::string>());
  EXPECT_TRUE(keys_.pub->verify(
      "DSSEv1 28 application/vnd.in-toto+json " + std::to_string(payload.size()) + " " + payload,
      sig));
}

TEST_F(EvidenceTest, ChangedSubjectDigestIsRejected) {
  Json envelope = Json::parse(*attestExecution(db_, "exec-1", *keys_.key));
  Json st = statementOf(envelope);
  st["subject"][0]["digest"]["sha256"] = std::string(64, 'e');
  envelope["payload"] = base64Encode(st.dump());
  AttestationCheck c = verifyAttestation(envelope.dump(), *keys_.pub);
  EXPECT_FALSE(c.ok);
  EXPECT_NE(c.reason.find("no signature by key"), std::string::npos) << c.reason;
}

TEST_F(EvidenceTest, EnvelopeResignedWithAnotherKeyIsRejected) {
  auto other = *SigningKey::generate();
  Json envelope = Json::parse(*attestExecution(db_, "exec-1", *other));
  EXPECT_TRUE(
      verifyAttestation(envelope.dump(), *PublicKey::fromPem(other->publicKeyPem(), "o").value())
          .ok);
  EXPECT_FALSE(verifyAttestation(envelope.dump(), *keys_.pub).ok);
  envelope["signatures"][0]["keyid"] = keys_.key->keyId();  // claiming the right key's id
  AttestationCheck c = verifyAttestation(envelope.dump(), *keys_.pub);
  EXPECT_FALSE(c.ok);
  EXPECT_NE(c.reason.find("no signature by key " + keys_.key->keyId()), std::string::npos)
      << c.reason;
}

// A passthrough tunnel (no requests seen inside) is listed by its origin; a denied connection
// is not a dependency.
TEST(EvidenceAttestTest, PassthroughTunnelsAreListedByOrigin) {
  TempDir dir;
  auto db = dir / "audit.db";
  auto key = *SigningKey::generate();
  {
    auto store = testing::openStore(db);
    ASSERT_TRUE(store);
    auto tunnel = testing::sampleConnection(1, "exec-1");  // pypi.org:443, passthrough
    store->recordConnection(tunnel);
    auto odd_port = testing::sampleConnection(2, "exec-1");
    odd_port.port = 8443;
    store->recordConnection(odd_port);
    store->recordConnection(testing::sampleConnection(3, "exec-1", Decision::kDeny));
    auto e = testing::sampleExecution("exec-1");
    e.artifacts_json = R"([{"path":"a.txt","bytes":1,"sha256":")" + kArtifactSha + R"("}])";
    ASSERT_TRUE(store->recordExecution(e).has_value());
  }
  auto env = attestExecution(db, "exec-1", *key);
  ASSERT_TRUE(env.has_value()) << env.error().message;
  Json deps =
      statementOf(Json::parse(*env))["predicate"]["buildDefinition"]["resolvedDependencies"];
  ASSERT_EQ(deps.size(), 3u) << deps.dump();
  EXPECT_EQ(deps[1]["uri"], "https://pypi.org");
  EXPECT_EQ(deps[1]["annotations"]["kind"], "tunnel");
  EXPECT_EQ(deps[1]["annotations"]["tls"], "passthrough");
  EXPECT_EQ(deps[2]["uri"], "https://files.pythonhosted.org:8443");
}

TEST(EvidenceAttestTest, ExecutionWithoutArtifactsIsRefused) {
  TempDir dir;
  auto db = dir / "audit.db";
  testing::populate(db);
  auto key = *SigningKey::generate();
  auto env = attestExecution(db, "exec-1", *key);
  ASSERT_FALSE(env.has_value());
  EXPECT_NE(env.error().message.find("no /output artifacts"), std::string::npos);
}

}  // namespace
}  // namespace sluice::audit
