// Where verify reads a chain from: the SQLite store (verify.cpp) or a node's rows in the central
// PostgreSQL store (pg_source.cpp). The chain walk and every check live in one place
// (verifyChain); a source only hands over rows, checkpoints and the recorded head.
#pragma once

#include <cstdint>
#include <expected>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>

#include "row_hash.hpp"
#include "rows.hpp"
#include "sluice/audit/evidence.hpp"
#include "sluice/audit/store.hpp"
#include "sluice/base/error.hpp"

namespace sluice::audit::detail {

/// One chained row as stored. The views stay valid until the source's next nextRow().
struct ChainRow {
  const ChainTable* table = nullptr;
  std::int64_t seq = 0;
  std::string_view prev_hash;
  std::string_view hash;
  std::span<const Value> values;  // every hashed column, in encoding order
  std::string_view key;           // the table's key_column text ("" when it has none)
  bool generated_ok = true;       // the table's generated_check holds (sources without one: true)
};

/// One checkpoints row. The views stay valid until the source's next nextCheckpoint().
struct CheckpointRow {
  std::int64_t seq = 0;
  std::int64_t position = 0;
  std::string_view root;
  std::string_view signature;
  std::string_view key_id;
  std::int64_t ts = 0;
  std::string_view frontier;
};

/// `c` as export and inclusion proofs print a checkpoint (chain_rows.hpp, checkpointJson).
nlohmann::ordered_json checkpointJson(const CheckpointRow& c);

/// The chain's recorded end (SQLite: chain_head; PostgreSQL: the shipped position).
struct ChainHead {
  std::int64_t seq = 0;
  std::string hash;
};

class ChainSource {
 public:
  virtual ~ChainSource() = default;
  /// The chain's next row, every chained table merged in seq order; false at the end.
  virtual std::expected<bool, base::Error> nextRow(ChainRow& row) = 0;
  /// The next checkpoint in (position, seq) order; false at the end.
  virtual std::expected<bool, base::Error> nextCheckpoint(CheckpointRow& ckpt) = 0;
  /// The recorded head; nullopt when it is missing.
  virtual std::expected<std::optional<ChainHead>, base::Error> head() = 0;
  /// What the head is called in verify's messages.
  virtual std::string_view headName() const = 0;
};

/// The SQLite store's chain (verify.cpp): rows after seq `after`, checkpoints past that position,
/// in one snapshot.
std::expected<std::unique_ptr<ChainSource>, base::Error> openSqliteChain(
    const std::filesystem::path& db, std::int64_t after);

/// `sluice audit export` of `source` (export.cpp): its rows in seq order, each checkpoint right
/// after the row at its position. `after`: the source starts after this seq (the stats' last_seq
/// when nothing follows).
std::expected<ExportStats, base::Error> exportSource(ChainSource& source, ExportFormat format,
                                                     std::int64_t after, std::ostream& out);

/// Walks `source`'s chain with every check of `sluice audit verify` (docs/audit.md).
/// `wal_missing` only adds its explanation to an unsigned log's message.
std::expected<VerifyResult, base::Error> verifyChain(ChainSource& source,
                                                     const VerifyOptions& options,
                                                     bool wal_missing = false);

}  // namespace sluice::audit::detail
