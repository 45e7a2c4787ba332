// Reading the chained tables (rows.hpp describes them): a row's columns as JSON, shared by
// export, inclusion proofs and attestations, so that what they print is exactly
// what the row hash covers and anyone can recompute it from the JSON alone.
#pragma once

#include <sqlite3.h>

#include <array>
#include <expected>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>

#include "merkle.hpp"
#include "row_hash.hpp"
#include "rows.hpp"

namespace sluice::audit::detail {

/// "SELECT seq, prev_hash, hash, <columns> FROM <table> WHERE seq > ?1 ORDER BY seq".
std::string chainSelectSql(const ChainTable& t);

/// "SELECT seq, hash FROM <table> WHERE <where> UNION ALL ... ORDER BY seq" over every chained
/// table: the chain's (seq, hash) pairs in seq order (SQLite merges the primary-key orders, so
/// this streams).
std::string chainHashesSql(std::string_view where);

/// The columns of a checkpoints row, in the order checkpointJson() reads them; append the
/// WHERE / ORDER BY.
inline constexpr std::string_view kCheckpointSelect =
    "SELECT seq, position, root, signature, key_id, ts FROM checkpoints";

/// The current row of a kCheckpointSelect statement as export and inclusion proofs print it:
/// {seq, position, root, ts, key_id, signature}.
nlohmann::ordered_json checkpointJson(sqlite3_stmt* s);

/// Column `col` of the current row: null, integer or text (the chained tables are STRICT).
nlohmann::ordered_json columnJson(sqlite3_stmt* s, int col);

/// The hashed columns of the current row of a chainSelectSql() statement, as an ordered
/// object (column name -> value).
nlohmann::ordered_json rowColumnsJson(sqlite3_stmt* s, const ChainTable& t);

/// Recomputes a row's hash from its JSON form: `columns` must hold exactly the table's hashed
/// columns, each null, an integer or a string. The error says what is wrong.
std::expected<std::string, std::string> hashJsonRow(RowHasher& hasher, const ChainTable& t,
                                                    std::int64_t seq, std::string_view prev_hash,
                                                    const nlohmann::ordered_json& columns);

/// A row's hashed columns as JSON from its values (a ChainSource's rows), as rowColumnsJson
/// gives them from SQLite.
nlohmann::ordered_json valuesJson(const ChainTable& t, std::span<const Value> values);

/// The `type` of an inclusion proof.
inline constexpr std::string_view kProofType = "sluice-inclusion-proof/v1";

/// The JSON of `sluice audit prove` (evidence.hpp, proveExecution) from its parts: the row,
/// the audit path of leaf seq - 1 in the tree of `tree_size` leaves, and the checkpoint
/// (checkpointJson).
std::string proofJson(const ChainTable& t, std::int64_t seq, std::string_view prev_hash,
                      std::string_view hash, nlohmann::ordered_json columns, std::int64_t tree_size,
                      std::span<const Digest> path, nlohmann::ordered_json checkpoint);

/// True when `j` is a string of exactly 64 lowercase hex characters (a SHA-256).
bool isHexDigest(const nlohmann::ordered_json& j);

}  // namespace sluice::audit::detail
