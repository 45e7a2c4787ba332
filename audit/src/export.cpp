// `sluice audit export` (rows and checkpoints in chain order, JSONL or CSV) and verifying a
// JSONL export from the stream alone; see evidence.hpp and docs/audit.md ("Export").
#include <fmt/format.h>

#include <istream>
#include <ostream>
#include <vector>

#include "chain_rows.hpp"
#include "chain_source.hpp"
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
  void row(const detail::ChainRow& r) {
    const detail::ChainTable& t = *r.table;
    Json cols = detail::valuesJson(t, r.values);
    const std::int64_t ms = timeOf(t, cols);
    if (format_ == ExportFormat::kCsv) {
      out_ << "row," << t.name << ',' << r.seq << ',' << formatTime(ms) << ',' << r.prev_hash << ','
           << r.hash << ',' << csvField(base::dumpJson(cols)) << "\r\n";
      return;
    }
    Json line = Json::object();
    line["type"] = "row";
    line["table"] = t.name;
    line["seq"] = r.seq;
    line["time"] = formatTime(ms);
    line["prev_hash"] = std::string(r.prev_hash);
    line["hash"] = std::string(r.hash);
    line["columns"] = std::move(cols);
    out_ << base::dumpJson(line) << '\n';
  }
  void checkpoint(const detail::CheckpointRow& c) {
    Json cp = detail::checkpointJson(c);
    if (format_ == ExportFormat::kCsv) {
      out_ << "checkpoint,checkpoints," << c.seq << ',' << formatTime(c.ts) << ",,,"
           << csvField(base::dumpJson(cp)) << "\r\n";
      return;
    }
    Json line = Json::object();
    line["type"] = "checkpoint";
    line["time"] = formatTime(c.ts);
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

base::Error writeFailed() {
  return base::Error{base::Code::kIo, "cannot write the export (output closed or full)"};
}

}  // namespace

namespace detail {

std::expected<ExportStats, base::Error> exportSource(ChainSource& source, ExportFormat format,
                                                     std::int64_t after, std::ostream& out) {
  ExportStats stats;
  stats.last_seq = after;
  Writer writer(out, format);
  CheckpointRow ckpt;
  auto have_ckpt = source.nextCheckpoint(ckpt);
  ChainRow row;
  for (;;) {
    if (!have_ckpt) return std::unexpected(have_ckpt.error());
    auto more = source.nextRow(row);
    if (!more) return std::unexpected(more.error());
    // Checkpoints go right after the row at their position (before any later row).
    while (*have_ckpt && (!*more || ckpt.position < row.seq)) {
      writer.checkpoint(ckpt);
      ++stats.checkpoints;
      have_ckpt = source.nextCheckpoint(ckpt);
      if (!have_ckpt) return std::unexpected(have_ckpt.error());
    }
    if (!*more) break;
    writer.row(row);
    ++stats.rows;
    stats.last_seq = row.seq;
    if (!out) return std::unexpected(writeFailed());
  }
  out.flush();
  if (!out) return std::unexpected(writeFailed());
  return stats;
}

}  // namespace detail

std::expected<ExportStats, base::Error> exportChain(const std::filesystem::path& db,
                                                    const ExportOptions& options,
                                                    std::ostream& out) {
  std::int64_t after = std::max<std::int64_t>(options.after_seq, 0);
  if (options.since_ms) {
    auto conn = detail::openReadSnapshot(db);
    if (!conn) return std::unexpected(conn.error());
    auto first = firstSeqSince(db, conn->get(), *options.since_ms);
    if (!first) return std::unexpected(first.error());
    if (!*first) return ExportStats{0, 0, after};  // nothing that recent
    after = std::max(after, **first - 1);
  }
  auto source = detail::openSqliteChain(db, after);
  if (!source) return std::unexpected(source.error());
  return detail::exportSource(**source, options.format, after, out);
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
