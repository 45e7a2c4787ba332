// `sluice audit export` (rows and checkpoints in chain order, JSONL or CSV) and verifying a
// JSONL export from the stream alone; see evidence.hpp and docs/audit.md ("Export").
#include <fmt/format.h>

#include <istream>
#include <ostream>
#include <vector>

#include "chain_rows.hpp"
#include "merkle.hpp"
#include "schema.hpp"
#include "sluice/audit/evidence.hpp"
#include "sluice/audit/reader.hpp"
#include "sluice/base/json.hpp"
#include "sqlite_db.hpp"

namespace sluice::audit {
namespace {

using detail::Stmt;
using Json = nlohmann::ordered_json;

struct TableCursor {
  const detail::ChainTable* table = nullptr;
  Stmt stmt;
  bool has_row = false;
  std::int64_t seq = 0;
};

std::expected<void, base::Error> step(const std::filesystem::path& db, sqlite3* raw,
                                      TableCursor& c) {
  int rc = c.stmt.step();
  c.has_row = rc == SQLITE_ROW;
  if (c.has_row) c.seq = c.stmt.columnInt(0);
  if (rc == SQLITE_ROW || rc == SQLITE_DONE) return {};
  return std::unexpected(
      detail::sqliteError(db, raw, rc, fmt::format("cannot read {}", c.table->name)));
}

/// RFC 4180 field.
std::string csvField(std::string_view s) {
  if (s.find_first_of(",\"\r\n") == std::string_view::npos) return std::string(s);
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

/// The first seq whose row's time is >= since (or none).
std::expected<std::optional<std::int64_t>, base::Error> firstSeqSince(
    const std::filesystem::path& db, sqlite3* raw, std::int64_t since) {
  std::optional<std::int64_t> first;
  for (const auto& t : detail::chainTables()) {
    auto st = detail::prepare(
        db, raw, fmt::format("SELECT min(seq) FROM {} WHERE {} >= ?1", t.name, t.time_column));
    if (!st) return std::unexpected(st.error());
    st->bindInt(1, since);
    if (st->step() == SQLITE_ROW && sqlite3_column_type(st->get(), 0) != SQLITE_NULL) {
      std::int64_t s = st->columnInt(0);
      if (!first || s < *first) first = s;
    }
  }
  return first;
}

class Writer {
 public:
  Writer(std::ostream& out, ExportFormat format) : out_(out), format_(format) {
    if (format_ == ExportFormat::kCsv) out_ << "type,table,seq,time,prev_hash,hash,data\r\n";
  }
  void row(const detail::ChainTable& t, sqlite3_stmt* s, std::int64_t seq) {
    Json cols = detail::rowColumnsJson(s, t);
    const std::int64_t ms = timeOf(t, cols);
    const std::string prev(reinterpret_cast<const char*>(sqlite3_column_text(s, 1)));
    const std::string hash(reinterpret_cast<const char*>(sqlite3_column_text(s, 2)));
    if (format_ == ExportFormat::kCsv) {
      out_ << "row," << t.name << ',' << seq << ',' << formatTime(ms) << ',' << prev << ',' << hash
           << ',' << csvField(base::dumpJson(cols)) << "\r\n";
      return;
    }
    Json line = Json::object();
    line["type"] = "row";
    line["table"] = t.name;
    line["seq"] = seq;
    line["time"] = formatTime(ms);
    line["prev_hash"] = prev;
    line["hash"] = hash;
    line["columns"] = std::move(cols);
    out_ << base::dumpJson(line) << '\n';
  }
  void checkpoint(Stmt& c) {
    Json cp = detail::checkpointJson(c.get());
    if (format_ == ExportFormat::kCsv) {
      out_ << "checkpoint,checkpoints," << c.columnInt(0) << ',' << formatTime(c.columnInt(5))
           << ",,," << csvField(base::dumpJson(cp)) << "\r\n";
      return;
    }
    Json line = Json::object();
    line["type"] = "checkpoint";
    line["time"] = formatTime(c.columnInt(5));
    line.update(cp);
    out_ << base::dumpJson(line) << '\n';
  }

 private:
  static std::int64_t timeOf(const detail::ChainTable& t, const Json& cols) {
    auto it = cols.find(std::string(t.time_column));
    return it != cols.end() && it->is_number_integer() ? it->get<std::int64_t>() : 0;
  }
  std::ostream& out_;
  ExportFormat format_;
};

}  // namespace

std::expected<ExportStats, base::Error> exportChain(const std::filesystem::path& db,
                                                    const ExportOptions& options,
                                                    std::ostream& out) {
  auto conn = detail::openReadSnapshot(db);
  if (!conn) return std::unexpected(conn.error());
  sqlite3* raw = conn->get();

  ExportStats stats;
  std::int64_t after = std::max<std::int64_t>(options.after_seq, 0);
  stats.last_seq = after;
  if (options.since_ms) {
    auto first = firstSeqSince(db, raw, *options.since_ms);
    if (!first) return std::unexpected(first.error());
    if (!*first) return stats;  // nothing that recent
    after = std::max(after, **first - 1);
  }

  std::vector<TableCursor> cursors;
  for (const auto& t : detail::chainTables()) {
    TableCursor c;
    c.table = &t;
    auto st = detail::prepare(db, raw, detail::chainSelectSql(t));
    if (!st) return std::unexpected(st.error());
    c.stmt = std::move(*st);
    c.stmt.bindInt(1, after);
    if (auto r = step(db, raw, c); !r) return std::unexpected(r.error());
    cursors.push_back(std::move(c));
  }
  auto ckpt = detail::prepare(
      db, raw,
      fmt::format("{} WHERE position > ?1 ORDER BY position, seq", detail::kCheckpointSelect));
  if (!ckpt) return std::unexpected(ckpt.error());
  ckpt->bindInt(1, after);
  int ckpt_rc = ckpt->step();

  Writer writer(out, options.format);
  for (;;) {
    TableCursor* cur = nullptr;
    for (auto& c : cursors) {
      if (c.has_row && (!cur || c.seq < cur->seq)) cur = &c;
    }
    // Checkpoints go right after the row at their position (before any later row).
    while (ckpt_rc == SQLITE_ROW && (!cur || ckpt->columnInt(1) < cur->seq)) {
      writer.checkpoint(*ckpt);
      ++stats.checkpoints;
      ckpt_rc = ckpt->step();
    }
    if (!cur) break;
    writer.row(*cur->table, cur->stmt.get(), cur->seq);
    ++stats.rows;
    stats.last_seq = cur->seq;
    if (auto r = step(db, raw, *cur); !r) return std::unexpected(r.error());
    if (!out)
      return std::unexpected(
          base::Error{base::Code::kIo, "cannot write the export (output closed or full)"});
  }
  if (ckpt_rc != SQLITE_DONE)
    return std::unexpected(detail::sqliteError(db, raw, ckpt_rc, "cannot read checkpoints"));
  out.flush();
  if (!out)
    return std::unexpected(
        base::Error{base::Code::kIo, "cannot write the export (output closed or full)"});
  return stats;
}

namespace {

/// One checkpoint line against the state of the verification so far; "" when good.
std::string checkExportCheckpoint(const Json& j, const std::optional<detail::MerkleFrontier>& tree,
                                  std::int64_t last_seq, const PublicKey* key,
                                  ExportVerifyResult& result) {
  if (!j.contains("position") || !j["position"].is_number_integer() || !j.contains("root") ||
      !j["root"].is_string() || !j.contains("ts") || !j["ts"].is_number_integer() ||
      !j.contains("signature") || !j["signature"].is_string() || !j.contains("key_id") ||
      !j["key_id"].is_string()) {
    return "checkpoint: position, root, ts, key_id or signature missing or of the wrong type";
  }
  const auto position = j["position"].get<std::int64_t>();
  const auto& root = j["root"].get_ref<const std::string&>();
  if (position != last_seq) {
    return fmt::format(
        "checkpoint at position {} comes after row seq {}: it belongs right "
        "after row {} (moved, or rows removed)",
        position, last_seq, position);
  }
  if (tree && detail::toHex(tree->root()) != root) {
    return fmt::format(
        "checkpoint at position {}: its root is not the Merkle root of the rows "
        "1..{} above",
        position, position);
  }
  if (key) {
    if (j["key_id"] != key->keyId()) {
      return fmt::format("checkpoint at position {}: signed by key {}, not by the given key {}",
                         position, j["key_id"].get<std::string>(), key->keyId());
    }
    auto sig = base64Decode(j["signature"].get<std::string>());
    if (!sig ||
        !key->verify(checkpointSignedText(position, root, j["ts"].get<std::int64_t>()), *sig)) {
      return fmt::format("checkpoint at position {}: the signature does not verify", position);
    }
    result.last_signed_position = position;
  }
  ++result.checkpoints;
  return {};
}

}  // namespace

ExportVerifyResult verifyExport(std::istream& in, const PublicKey* key) {
  ExportVerifyResult result;
  detail::RowHasher hasher;
  std::optional<detail::MerkleFrontier> tree;
  std::string prev;
  std::string line;
  std::uint64_t line_no = 0;
  auto broken = [&](const std::string& where, const std::string& why) {
    result.ok = false;
    result.first_broken = fmt::format("line {}{}: {}", line_no, where, why);
    return result;
  };
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    Json j = Json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("type"))
      return broken("", "not a JSON object with a type");
    if (j["type"] == "checkpoint") {
      if (std::string why = checkExportCheckpoint(j, tree, result.last_seq, key, result);
          !why.empty()) {
        return broken("", why);
      }
      continue;
    }
    if (j["type"] != "row") return broken("", "unknown type");
    const detail::ChainTable* t = j.contains("table") && j["table"].is_string()
                                      ? detail::findChainTable(j["table"].get<std::string>())
                                      : nullptr;
    if (!t || !j.contains("seq") || !j["seq"].is_number_integer() || !j.contains("prev_hash") ||
        !j["prev_hash"].is_string() || !j.contains("hash") || !j["hash"].is_string() ||
        !j.contains("columns")) {
      return broken("", "row: table, seq, prev_hash, hash or columns missing or invalid");
    }
    const auto seq = j["seq"].get<std::int64_t>();
    const auto& stored_prev = j["prev_hash"].get_ref<const std::string&>();
    const auto& stored_hash = j["hash"].get_ref<const std::string&>();
    const std::string where = fmt::format(" ({} seq {})", t->name, seq);
    if (result.rows == 0) {
      // The first row anchors the piece: the genesis hash at seq 1, else its own prev_hash.
      result.first_seq = seq;
      if (seq == 1) {
        if (stored_prev != detail::kGenesisHash)
          return broken(where, "the first row's prev_hash is not the genesis hash");
        tree.emplace();
        result.roots_checked = true;
      }
      prev = stored_prev;
    } else if (seq != result.last_seq + 1) {
      return broken(where, fmt::format("expected seq {} (rows missing, duplicated or reordered)",
                                       result.last_seq + 1));
    }
    auto computed = detail::hashJsonRow(hasher, *t, seq, stored_prev, j["columns"]);
    if (!computed) return broken(where, computed.error());
    if (*computed != stored_hash)
      return broken(where, "hash does not match the row's columns (row edited)");
    if (stored_prev != prev)
      return broken(where,
                    "prev_hash does not match the row before it (rows removed or reordered)");
    prev = stored_hash;
    if (tree) tree->append(*detail::fromHex(stored_hash));
    result.last_seq = seq;
    ++result.rows;
  }
  result.ok = true;
  return result;
}

}  // namespace sluice::audit
