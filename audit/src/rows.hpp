// The chained tables described once: each event type's table, its hashed columns in encoding
// order, and how each value is taken from the event. The writer's INSERT statements and row
// hashes, verify's SELECTs, export's columns and the reader's column lists are all derived from
// these descriptions, so a new event type is one description here plus its schema.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "row_hash.hpp"
#include "sluice/audit/event_sink.hpp"
#include "sluice/audit/store.hpp"
#include "sqlite_db.hpp"

namespace sluice::audit::detail {

/// A policy text as the writer stores it: recordPolicy's arguments and when the store first saw
/// it.
struct PolicyRecord {
  std::string sha256, workflow, yaml;
  std::int64_t loaded_at = 0;
};

/// What a column's stored text means to readers: `audit query` and `show` print kTime columns
/// (epoch ms) as RFC 3339 and embed kJson columns as JSON rather than as strings.
enum class ColumnKind : std::uint8_t { kPlain, kTime, kJson };

/// The most columns of any chained table.
inline constexpr std::size_t kMaxColumns = 24;

/// One buffer per column for values computed from an event (a list's JSON text): a Value may
/// point into its column's buffer until the row is bound, stepped and hashed. Writer only.
using RowScratch = std::array<std::string, kMaxColumns>;

/// One hashed column of the table of `Event`: its name, how its value is taken from the event,
/// and what its text means to readers.
template <typename Event>
struct Column {
  std::string_view name;
  /// `buffer` is the column's own (RowScratch), for a value that must be computed.
  Value (*value)(const Event&, std::string& buffer);
  ColumnKind kind = ColumnKind::kPlain;
};

/// A chained table as data, without its event type (verify, export, proofs and the reader work
/// from this). `columns` and `kinds` are derived from the table's Column list.
struct ChainTable {
  std::size_t index;  // position in chainTables()
  std::string_view name;
  std::span<const std::string_view> columns;  // hashed columns, in encoding order
  std::span<const ColumnKind> kinds;          // per column
  std::string_view time_column;               // epoch ms of the event
  /// The column that names a row in verify's messages ("id 57"); empty: the row's seq.
  std::string_view key_column;
  /// A condition that holds when each generated (VIRTUAL) column of the table equals its
  /// definition ("1" when there are none): they are not stored, but a rewritten definition
  /// would change what `audit query` shows, so verify checks them.
  std::string_view generated_check = "1";
  /// INSERT OR IGNORE: the table is content-addressed (policies), and another process may
  /// already hold the row; such a row takes no seq.
  bool insert_or_ignore = false;
  /// Trailing columns added by a later schema version that a row's hash covers only when one of
  /// them is set (hashedValues): rows written before they existed keep their hashes, and a
  /// value written into them later breaks the row's hash.
  std::size_t optional_tail = 0;
};

/// The values of a row of `t` that its hash covers, in encoding order (docs/audit.md "Row
/// hashes"): `values`, without the table's optional tail when every value in it is NULL.
std::span<const Value> hashedValues(const ChainTable& t, std::span<const Value> values);

/// The full description of the table of `Event`: the table and its columns with their values.
template <typename Event>
struct RowDescription {
  const ChainTable& table;
  std::span<const Column<Event>> columns;
};

/// The description of each event type's table (specialised in rows.cpp for PolicyRecord,
/// ExecutionRecord, ConnectionEvent, RequestEvent, ForwardEvent, DnsEvent and ApprovalEvent).
template <typename Event>
const RowDescription<Event>& rowOf();

/// Every chained table, in a fixed order (rows interleave by seq).
inline constexpr std::size_t kChainTableCount = 7;
const std::array<ChainTable, kChainTableCount>& chainTables();
const ChainTable* findChainTable(std::string_view name);

/// "INSERT INTO <table> (seq, prev_hash, hash, <columns>) VALUES (?1, ?2, ?3, ?4, ...)".
std::string insertSql(const ChainTable& t);

/// Binds a row to an insertSql() statement: seq, prev_hash, hash, then the values. Text is not
/// copied: the values must outlive the next step().
void bindRow(Stmt& stmt, std::int64_t seq, std::string_view prev_hash, std::string_view hash,
             std::span<const Value> values);

/// "<prefix>c1, <prefix>c2, ..." over the table's hashed columns, leaving out `omit`: the
/// column lists of `audit query` and `show`.
std::string columnList(const ChainTable& t, std::string_view prefix,
                       std::initializer_list<std::string_view> omit = {});

/// The kind of a result column named `name` in any chained table (kPlain when none has it).
ColumnKind columnKind(std::string_view name);

/// Rows' values copied into one buffer: how events travel from producers to the writer. A
/// producer packs an event's values (rowValues) and its text bytes are copied once into
/// `bytes`; the writer hashes and binds them from there. Nothing is allocated or freed per row
/// once the buffers have grown (both sides keep their capacity across swaps), and the writer
/// never frees memory its producers allocated (a free into another thread's malloc arena takes
/// that arena's lock).
class RowArena {
 public:
  /// Where a row's values are: cells [first, first + count).
  struct Span {
    std::uint32_t first = 0, count = 0;
  };
  /// Appends the values (text copied); they may point anywhere, e.g. into the event.
  Span append(std::span<const Value> values);
  /// The values of `row`, into `out` (kMaxColumns long); text points into this arena, valid
  /// until the next append(), clear() or swap().
  std::span<const Value> values(Span row, std::span<Value> out) const;
  void clear() {
    cells_.clear();
    bytes_.clear();
  }
  void swap(RowArena& other) noexcept {
    cells_.swap(other.cells_);
    bytes_.swap(other.bytes_);
  }

 private:
  // 16 bytes: a batch holds thousands of rows of ~20 cells, which the writer reads on another
  // CPU than the producer wrote them on.
  struct Cell {
    std::uint64_t word = 0;  // an integer, a Real's bits, or (text, blob) where in bytes_
    std::uint32_t size = 0;  // text or blob (SQLite's limit on a value is below 4 GiB)
    std::uint8_t kind = 0;   // the Value's index
  };
  std::vector<Cell> cells_;
  std::string bytes_;
};

/// `list` as a JSON array of strings, in `buffer`: the bytes of base::dumpJson(json(list))
/// (invalid UTF-8 replaced, never thrown on). Lists of printable ASCII without '"' or '\\'
/// (secret names) are written directly, without building a json value: this runs on the
/// proxy's request path.
std::string_view jsonStringList(const std::vector<std::string>& list, std::string& buffer);

/// The row's values, in column order, into `out` (kMaxColumns long).
template <typename Event>
std::span<const Value> rowValues(const RowDescription<Event>& row, const Event& event,
                                 RowScratch& scratch, std::span<Value> out) {
  for (std::size_t i = 0; i < row.columns.size(); ++i)
    out[i] = row.columns[i].value(event, scratch[i]);
  return out.first(row.columns.size());
}

}  // namespace sluice::audit::detail
