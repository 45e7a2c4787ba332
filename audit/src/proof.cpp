// `sluice audit prove` / `check-proof`: the inclusion proof of one execution's row against the
// latest signed checkpoint, and its verification without the database; see evidence.hpp and
// docs/audit.md ("Inclusion proofs").
#include <fmt/format.h>

#include <vector>

#include "chain_rows.hpp"
#include "merkle.hpp"
#include "schema.hpp"
#include "sluice/audit/evidence.hpp"
#include "sluice/base/json.hpp"
#include "sqlite_db.hpp"

namespace sluice::audit {
namespace {

using Json = nlohmann::ordered_json;
using detail::kProofType;

/// The audit path of leaf `index` and the root of the tree over rows 1..position, from one pass
/// over their chain hashes in seq order, checking they form an unbroken sequence. Memory is
/// O(log position) (InclusionPathBuilder): a proof against a checkpoint of ten million rows
/// does not hold ten million leaves.
std::expected<detail::InclusionPathBuilder, base::Error> streamPath(const std::filesystem::path& db,
                                                                    sqlite3* raw,
                                                                    std::int64_t position,
                                                                    std::int64_t index) {
  auto st = detail::prepare(db, raw, detail::chainHashesSql("seq <= ?1"));
  if (!st) return std::unexpected(st.error());
  st->bindInt(1, position);
  detail::InclusionPathBuilder tree(static_cast<std::uint64_t>(index),
                                    static_cast<std::uint64_t>(position));
  std::int64_t rows = 0;
  int rc;
  while ((rc = st->step()) == SQLITE_ROW) {
    auto d = detail::fromHex(st->columnText(1));
    if (st->columnInt(0) != rows + 1 || !d) {
      return std::unexpected(
          base::Error{base::Code::kIntegrity,
                      fmt::format("{}: the chain is broken at seq {}; run sluice audit verify",
                                  db.string(), rows + 1)});
    }
    tree.append(detail::leafHash(*d));
    ++rows;
  }
  if (rc != SQLITE_DONE)
    return std::unexpected(detail::sqliteError(db, raw, rc, "cannot read the chain"));
  if (rows != position) {
    return std::unexpected(base::Error{
        base::Code::kIntegrity,
        fmt::format(
            "{}: the chain ends at seq {} but the checkpoint covers {}; run sluice audit verify",
            db.string(), rows, position)});
  }
  return tree;
}

}  // namespace

std::expected<std::string, base::Error> proveExecution(const std::filesystem::path& db,
                                                       std::string_view execution_id) {
  auto conn = detail::openReadSnapshot(db);
  if (!conn) return std::unexpected(conn.error());
  sqlite3* raw = conn->get();

  const detail::ChainTable& table = *detail::findChainTable("executions");
  std::string sql = detail::chainSelectSql(table);
  sql = sql.substr(0, sql.find(" WHERE ")) + " WHERE id = ?1";
  auto row = detail::executionRow(db, raw, sql, execution_id);
  if (!row) return std::unexpected(row.error());
  const std::int64_t seq = row->columnInt(0);

  auto ckpt = detail::prepare(
      db, raw,
      fmt::format("{} ORDER BY position DESC, seq DESC LIMIT 1", detail::kCheckpointSelect));
  if (!ckpt) return std::unexpected(ckpt.error());
  if (ckpt->step() != SQLITE_ROW || ckpt->columnInt(1) < seq) {
    return std::unexpected(base::Error{
        base::Code::kNotFound,
        fmt::format(
            "{}: execution {} (seq {}) is not covered by a signed checkpoint yet{}; one is written "
            "every N rows or T seconds and when the writer closes (a store opened with "
            "--signing-key)",
            db.string(), execution_id, seq,
            sqlite3_column_type(ckpt->get(), 1) == SQLITE_INTEGER
                ? fmt::format(" (the latest covers seq 1..{})", ckpt->columnInt(1))
                : std::string(" (the database has no checkpoints)"))});
  }
  const std::int64_t position = ckpt->columnInt(1);
  auto tree = streamPath(db, raw, position, seq - 1);
  if (!tree) return std::unexpected(tree.error());
  if (detail::toHex(tree->root()) != ckpt->columnText(2)) {
    return std::unexpected(base::Error{base::Code::kIntegrity,
                                       fmt::format("{}: rows 1..{} do not match checkpoint seq "
                                                   "{}'s root; run sluice audit verify --pubkey",
                                                   db.string(), position, ckpt->columnInt(0))});
  }
  return detail::proofJson(table, seq, row->columnText(1), row->columnText(2),
                           detail::rowColumnsJson(row->get(), table), position, tree->path(),
                           detail::checkpointJson(ckpt->get()));
}

ProofCheck checkProof(std::string_view proof_json, const PublicKey& key) {
  ProofCheck out;
  auto reject = [&](std::string why) {
    out.ok = false;
    out.reason = std::move(why);
    return out;
  };
  Json p = Json::parse(proof_json, nullptr, false);
  if (p.is_discarded() || !p.is_object()) return reject("not a JSON object");
  if (p.value("type", "") != kProofType)
    return reject(fmt::format("type is not \"{}\"", kProofType));
  const Json& row = p["row"];
  const Json& cp = p["checkpoint"];
  if (!row.is_object() || !cp.is_object() || !p["audit_path"].is_array() ||
      !p["leaf_index"].is_number_integer() || !p["tree_size"].is_number_integer()) {
    return reject("row, checkpoint, audit_path, leaf_index or tree_size missing");
  }
  if (!row["table"].is_string() || !row["seq"].is_number_integer() ||
      !detail::isHexDigest(row["prev_hash"]) || !detail::isHexDigest(row["hash"])) {
    return reject("row: table, seq, prev_hash or hash missing or malformed");
  }
  if (!cp["position"].is_number_integer() || !detail::isHexDigest(cp["root"]) ||
      !cp["ts"].is_number_integer() || !cp["key_id"].is_string() || !cp["signature"].is_string()) {
    return reject("checkpoint: position, root, ts, key_id or signature missing or malformed");
  }
  const detail::ChainTable* table = detail::findChainTable(row["table"].get<std::string>());
  if (!table) return reject("row: unknown table " + row["table"].get<std::string>());
  out.seq = row["seq"].get<std::int64_t>();
  out.position = cp["position"].get<std::int64_t>();
  if (row["columns"].is_object() && row["columns"].contains("id") &&
      row["columns"]["id"].is_string())
    out.execution_id = row["columns"]["id"].get<std::string>();

  // 1. The row: its hash from its columns (so the receipt it carries is the one hashed).
  detail::RowHasher hasher;
  auto computed = detail::hashJsonRow(hasher, *table, out.seq, row["prev_hash"].get<std::string>(),
                                      row["columns"]);
  if (!computed) return reject("row: " + computed.error());
  if (*computed != row["hash"].get<std::string>())
    return reject("row: its hash does not match its columns (the receipt or a column was changed)");
  // 2. The path: from the row's leaf to the checkpoint's root.
  if (p["leaf_index"].get<std::int64_t>() != out.seq - 1 ||
      p["tree_size"].get<std::int64_t>() != out.position) {
    return reject("leaf_index or tree_size do not match the row's seq and the checkpoint");
  }
  std::vector<detail::Digest> path;
  for (const Json& h : p["audit_path"]) {
    if (!detail::isHexDigest(h)) return reject("audit_path: not a list of SHA-256 hex digests");
    path.push_back(*detail::fromHex(h.get<std::string>()));
  }
  if (out.seq < 1 || out.position < out.seq)
    return reject("the row is not inside the checkpoint's tree");
  auto root = detail::rootFromPath(
      static_cast<std::uint64_t>(out.seq - 1), static_cast<std::uint64_t>(out.position),
      detail::leafHash(*detail::fromHex(row["hash"].get<std::string>())), path);
  if (!root || detail::toHex(*root) != cp["root"].get<std::string>())
    return reject("audit_path: does not lead from the row to the checkpoint's root");
  // 3. The checkpoint: signed by the auditor's key.
  if (cp["key_id"].get<std::string>() != key.keyId()) {
    return reject(fmt::format("checkpoint: signed by key {}, not by the given key {}",
                              cp["key_id"].get<std::string>(), key.keyId()));
  }
  auto sig = base64Decode(cp["signature"].get<std::string>());
  if (!sig || !key.verify(checkpointSignedText(out.position, cp["root"].get<std::string>(),
                                               cp["ts"].get<std::int64_t>()),
                          *sig)) {
    return reject("checkpoint: the signature does not verify");
  }
  out.ok = true;
  return out;
}

}  // namespace sluice::audit
