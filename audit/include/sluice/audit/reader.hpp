// Read-only access for auditors: filtered queries, arbitrary read-only SQL, one execution's
// full record, and the output formats of `sluice audit` (aligned table, JSON, RFC 4180 CSV).
#pragma once

#include <cstdint>
#include <expected>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "sluice/audit/store.hpp"

namespace sluice::audit {

/// One result cell: NULL, integer, real or text.
using Cell = std::variant<std::monostate, std::int64_t, double, std::string>;

/// A result set with named columns.
struct ResultTable {
  std::vector<std::string> columns;
  /// Per column: its text cells hold JSON (argv, usage, injected_secrets, ...), which the JSON
  /// output embeds as JSON rather than as a string.
  std::vector<bool> json_columns;
  std::vector<std::vector<Cell>> rows;
};

enum class OutputFormat { kTable, kJson, kCsv };

/// "table" | "json" | "csv".
std::expected<OutputFormat, base::Error> parseFormat(std::string_view name);

/// table: aligned columns for a terminal (NULL shown empty; long cells cut at 80 characters
/// with "..."; newlines shown as \n). json: one JSON array of objects. csv: RFC 4180 (header
/// row, CRLF line ends, fields with `,` `"` CR or LF quoted, quotes doubled; NULL is empty).
std::string formatResult(const ResultTable& table, OutputFormat format);

/// Filters of `sluice audit query`. Unset fields do not filter.
struct QueryFilter {
  /// "executions" (each with its connection summary), "connections", "requests", "forwards"
  /// (write-ahead rows of requests sent upstream, with `completed`), "dns" (queries of
  /// sluice's DNS; `host` filters the name), "approvals" (decided approvals of `ask` rules;
  /// since/until apply to asked_at) or "events"
  /// (connections and requests interleaved), "shadow-diff" (connections, requests and DNS
  /// rows whose shadow policy decided otherwise: `audit query --shadow-diff`). Empty:
  /// "events" when decision or host is set, else "executions".
  std::string kind;
  std::optional<std::string> workflow;
  std::optional<std::string> execution;
  std::optional<std::string> decision;  // allow | deny
  std::optional<std::string> host;
  std::optional<std::int64_t> since_ms;  // inclusive
  std::optional<std::int64_t> until_ms;  // exclusive
  std::optional<std::int64_t> limit;
};

/// One execution's full record (`sluice audit show`).
struct ExecutionDetail {
  ResultTable execution;  // one row
  std::string receipt_json;
  ResultTable connections;
  ResultTable requests;
};

/// A read-only connection to an audit database: opened with SQLITE_OPEN_READONLY (a missing
/// file is an error, never created), `PRAGMA query_only`, no ATTACH, and an authorizer that
/// refuses every write, schema change, transaction, ATTACH and state-changing pragma. Or one
/// node's rows in the central PostgreSQL store (openCentralReader, central.hpp): the same
/// queries, with the same output.
class Reader {
 public:
  static std::expected<std::unique_ptr<Reader>, base::Error> open(const std::filesystem::path& db);
  class Impl;
  /// For the backends (reader.cpp, pg_reader.cpp).
  explicit Reader(std::unique_ptr<Impl> impl);
  ~Reader();
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  /// Runs exactly one read-only statement.
  std::expected<ResultTable, base::Error> sql(std::string_view statement);
  /// `sluice audit query`. Rows are in chain (insertion) order; times as RFC 3339 UTC.
  std::expected<ResultTable, base::Error> query(const QueryFilter& filter);
  /// nullopt when no execution has this id.
  std::expected<std::optional<ExecutionDetail>, base::Error> show(std::string_view execution_id);

 private:
  std::unique_ptr<Impl> impl_;
};

/// Parses a time for --since/--until: RFC 3339 ("2026-11-21T10:00:00Z", "...+02:00",
/// fractional seconds; a bare date "2026-11-21" is midnight UTC) or a relative form meaning
/// that long before `now_ms` ("90s", "15m", "1h", "7d", "2w"). Returns epoch milliseconds.
std::expected<std::int64_t, base::Error> parseTime(std::string_view text, std::int64_t now_ms);

/// Epoch milliseconds as RFC 3339 UTC with milliseconds ("2026-11-21T10:00:00.123Z").
std::string formatTime(std::int64_t ms);

}  // namespace sluice::audit
