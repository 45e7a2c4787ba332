// The chained tables as data, rows as JSON, and hashing a row from its JSON; see chain_rows.hpp.
#include "chain_rows.hpp"

#include <fmt/format.h>

#include "chain_source.hpp"
#include "merkle.hpp"
#include "sluice/base/json.hpp"

namespace sluice::audit::detail {

std::string chainSelectSql(const ChainTable& t) {
  std::string sql = "SELECT seq, prev_hash, hash";
  for (auto c : t.columns) {
    sql += ", ";
    sql += c;
  }
  return fmt::format("{} FROM {} WHERE seq > ?1 ORDER BY seq", sql, t.name);
}

std::string chainHashesSql(std::string_view where) {
  std::string sql;
  for (const auto& t : chainTables()) {
    if (!sql.empty()) sql += " UNION ALL ";
    sql += fmt::format("SELECT seq, hash FROM {} WHERE {}", t.name, where);
  }
  return sql + " ORDER BY seq";
}

nlohmann::ordered_json columnJson(sqlite3_stmt* s, int col) {
  switch (sqlite3_column_type(s, col)) {
    case SQLITE_INTEGER:
      return static_cast<std::int64_t>(sqlite3_column_int64(s, col));
    case SQLITE_NULL:
      return nullptr;
    default: {
      const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(s, col));
      return std::string(p ? p : "", static_cast<std::size_t>(sqlite3_column_bytes(s, col)));
    }
  }
}

nlohmann::ordered_json rowColumnsJson(sqlite3_stmt* s, const ChainTable& t) {
  nlohmann::ordered_json cols = nlohmann::ordered_json::object();
  for (std::size_t i = 0; i < t.columns.size(); ++i)
    cols[std::string(t.columns[i])] = columnJson(s, static_cast<int>(i + 3));
  return cols;
}

nlohmann::ordered_json checkpointJson(sqlite3_stmt* s) {
  nlohmann::ordered_json cp = nlohmann::ordered_json::object();
  cp["seq"] = columnJson(s, 0);
  cp["position"] = columnJson(s, 1);
  cp["root"] = columnJson(s, 2);
  cp["ts"] = columnJson(s, 5);
  cp["key_id"] = columnJson(s, 4);
  cp["signature"] = columnJson(s, 3);
  return cp;
}

nlohmann::ordered_json checkpointJson(const CheckpointRow& c) {
  // The keys and their order of checkpointJson(sqlite3_stmt*): a proof is the same from either.
  nlohmann::ordered_json cp = nlohmann::ordered_json::object();
  cp["seq"] = c.seq;
  cp["position"] = c.position;
  cp["root"] = std::string(c.root);
  cp["ts"] = c.ts;
  cp["key_id"] = std::string(c.key_id);
  cp["signature"] = std::string(c.signature);
  return cp;
}

std::expected<std::string, std::string> hashJsonRow(RowHasher& hasher, const ChainTable& t,
                                                    std::int64_t seq, std::string_view prev_hash,
                                                    const nlohmann::ordered_json& columns) {
  if (!columns.is_object()) return std::unexpected("columns is not an object");
  // A row exported before the table's optional tail existed has none of it (read as NULL).
  const std::size_t required = t.columns.size() - t.optional_tail;
  if (columns.size() != t.columns.size() && columns.size() != required) {
    return std::unexpected(
        fmt::format("{} has {} columns, not {}", t.name, t.columns.size(), columns.size()));
  }
  std::vector<Value> values;
  values.reserve(t.columns.size());
  for (std::size_t i = 0; i < t.columns.size(); ++i) {
    const auto name = t.columns[i];
    auto it = columns.find(std::string(name));
    if (it == columns.end() && i >= required && columns.size() == required) {
      values.emplace_back();
    } else if (it == columns.end()) {
      return std::unexpected(fmt::format("column {} is missing", name));
    } else if (it->is_null()) {
      values.emplace_back();
    } else if (it->is_number_integer()) {
      values.emplace_back(it->get<std::int64_t>());
    } else if (it->is_string()) {
      values.emplace_back(std::string_view(it->get_ref<const std::string&>()));
    } else {
      return std::unexpected(
          fmt::format("column {} is neither null, an integer nor a string", name));
    }
  }
  return hasher.hash(t.name, seq, prev_hash, hashedValues(t, values));
}

nlohmann::ordered_json valuesJson(const ChainTable& t, std::span<const Value> values) {
  nlohmann::ordered_json cols = nlohmann::ordered_json::object();
  for (std::size_t i = 0; i < t.columns.size() && i < values.size(); ++i) {
    nlohmann::ordered_json v = nullptr;
    if (const auto* n = std::get_if<std::int64_t>(&values[i])) v = *n;
    if (const auto* s = std::get_if<std::string_view>(&values[i])) v = std::string(*s);
    cols[std::string(t.columns[i])] = std::move(v);
  }
  return cols;
}

std::string proofJson(const ChainTable& t, std::int64_t seq, std::string_view prev_hash,
                      std::string_view hash, nlohmann::ordered_json columns, std::int64_t tree_size,
                      std::span<const Digest> path, nlohmann::ordered_json checkpoint) {
  nlohmann::ordered_json audit_path = nlohmann::ordered_json::array();
  for (const auto& d : path) audit_path.push_back(toHex(d));
  nlohmann::ordered_json proof = nlohmann::ordered_json::object();
  proof["type"] = kProofType;
  proof["row"] = {{"table", t.name},
                  {"seq", seq},
                  {"prev_hash", std::string(prev_hash)},
                  {"hash", std::string(hash)},
                  {"columns", std::move(columns)}};
  proof["leaf_index"] = seq - 1;
  proof["tree_size"] = tree_size;
  proof["audit_path"] = std::move(audit_path);
  proof["checkpoint"] = std::move(checkpoint);
  return base::dumpJson(proof, 2) + "\n";
}

bool isHexDigest(const nlohmann::ordered_json& j) {
  return j.is_string() && fromHex(j.get_ref<const std::string&>()).has_value();
}

}  // namespace sluice::audit::detail
