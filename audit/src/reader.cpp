// Read-only access for auditors (see reader.hpp): the authorizer-guarded connection, the
// filtered queries behind `sluice audit query`, and `show`.
#include "sluice/audit/reader.hpp"

#include <fmt/format.h>

#include <array>
#include <string>

#include "reader_backend.hpp"
#include "rows.hpp"
#include "schema.hpp"
#include "sqlite_db.hpp"

namespace sluice::audit {
namespace {

using detail::Stmt;

/// Pragmas that only read. With an argument they are still reads for the ones in
/// kArgumentReadPragmas (the argument names a table or index); every other pragma with an
/// argument sets something and is refused.
constexpr std::array<std::string_view, 22> kReadPragmas = {
    "application_id",   "user_version",    "schema_version", "data_version",   "page_count",
    "page_size",        "freelist_count",  "database_list",  "collation_list", "function_list",
    "pragma_list",      "compile_options", "encoding",       "journal_mode",   "table_list",
    "table_info",       "table_xinfo",     "index_list",     "index_info",     "index_xinfo",
    "foreign_key_list", "quick_check"};
constexpr std::array<std::string_view, 8> kArgumentReadPragmas = {
    "table_info",  "table_xinfo",      "index_list", "index_info",
    "index_xinfo", "foreign_key_list", "table_list", "quick_check"};

template <std::size_t N>
bool contains(const std::array<std::string_view, N>& list, std::string_view s) {
  for (auto x : list) {
    if (x == s) return true;
  }
  return false;
}

using detail::Bind;
using detail::intBind;
using detail::textBind;

/// The SQL of `sluice audit query` and `show` for a filter: one statement per kind, its
/// parameters bound in order, for either backend (QueryDialect). The event kinds list their
/// table's columns from the row descriptions (rows.hpp).
class QuerySql {
 public:
  QuerySql(const QueryFilter& f, const detail::QueryDialect& d) : f_(f), d_(d) {
    if (d_.postgres) node_ = param(textBind(d_.node));
  }

  /// "?N" (or "$N") for a new parameter.
  std::string param(Bind b) {
    binds_.push_back(std::move(b));
    return fmt::format("{}{}", d_.postgres ? '$' : '?', binds_.size());
  }
  const std::vector<Bind>& binds() const { return binds_; }

  /// `table` as `alias` in a FROM clause. Every table is read through here: in PostgreSQL that
  /// is only the node's rows, so no other node's row can reach a result.
  std::string from(std::string_view table, std::string_view alias) const {
    if (!d_.postgres) return fmt::format("{} {}", table, alias);
    // SQLite's requests.id is a generated column (= seq); the central table has no copy of it.
    const std::string_view id = table == "requests" ? "seq AS id, " : "";
    return fmt::format("(SELECT {}* FROM {} WHERE node = {}) {}", id, table, node_, alias);
  }

  /// a = b where NULL equals NULL.
  std::string same(std::string_view a, std::string_view b) const {
    return fmt::format("{} {} {}", a, d_.postgres ? "IS NOT DISTINCT FROM" : "IS", b);
  }

  /// The attempts of e.id with `decision`, counted as its receipt counts them (docs/audit.md
  /// "What is counted"): every requests row, and the connections rows
  /// audit::countsAsAttempt selects (the same rule in SQL).
  std::string attempts(std::string_view decision) const {
    const std::string d = "'" + std::string(decision) + "'";
    return "((SELECT count(*) FROM " + from("requests", "r") +
           " WHERE r.execution_id = e.id AND r.decision = " + d + ") + (SELECT count(*) FROM " +
           from("connections", "c") + " WHERE c.execution_id = e.id AND c.decision = " + d +
           " AND coalesce(c.kind, '') <> 'http'"
           " AND NOT (c.decision IN ('allow', 'would_deny')"
           " AND coalesce(c.tls, 'none') IN ('inspect', 'none'))))";
  }

  /// The sum of the execution's connections' `column` (0 when none).
  std::string connectionSum(std::string_view column) const {
    return fmt::format(
        "(SELECT CAST(coalesce(sum(c.{}), 0) AS BIGINT) FROM {}"
        " WHERE c.execution_id = e.id)",
        column, from("connections", "c"));
  }

  /// Each execution with a summary of what it tried to reach.
  std::string executions() {
    const std::string hosts =
        d_.postgres ? "string_agg(h, ' ' ORDER BY h)" : "group_concat(h, ' ')";
    std::string sql =
        "SELECT e.id, e.workflow, e.started_at, e.ended_at - e.started_at AS duration_ms,"
        " e.exit_code, e.signal, e.limit_hit, " +
        attempts("allow") + " AS allowed, " + attempts("deny") + " AS denied, " + attempts("fail") +
        " AS failed, " + connectionSum("bytes_up") + " AS bytes_out, " +
        connectionSum("bytes_down") + " AS bytes_in, (SELECT " + hosts +
        " FROM (SELECT DISTINCT c.host || ':' || c.port AS h FROM " + from("connections", "c") +
        " WHERE c.execution_id = e.id ORDER BY h) hs) AS hosts FROM " + from("executions", "e") +
        " WHERE 1 = 1";
    if (f_.workflow) sql += " AND e.workflow = " + param(textBind(*f_.workflow));
    if (f_.execution) sql += " AND e.id = " + param(textBind(*f_.execution));
    if (f_.since_ms) sql += " AND e.started_at >= " + param(intBind(*f_.since_ms));
    if (f_.until_ms) sql += " AND e.started_at < " + param(intBind(*f_.until_ms));
    // --decision and --host together mean one connection with both (e.g. allowed to host Y).
    if (f_.decision || f_.host) {
      sql +=
          " AND EXISTS (SELECT 1 FROM " + from("connections", "c") + " WHERE c.execution_id = e.id";
      if (f_.decision) sql += " AND c.decision = " + param(textBind(*f_.decision));
      if (f_.host) sql += " AND c.host = " + param(textBind(*f_.host));
      sql += ")";
    }
    return sql;
  }

  /// The rows of one event kind (or connections and requests interleaved); "" for an unknown
  /// kind.
  std::string events(std::string_view kind) {
    if (kind == "connections") {
      return "SELECT t.seq, " + columns("connections", {"policy_sha256"}) + " FROM " +
             from("connections", "t") + where();
    }
    if (kind == "requests")
      return "SELECT t.id, " + columns("requests") + " FROM " + from("requests", "t") + where();
    if (kind == "forwards") {
      // `completed`: the exchange's requests row exists (docs/audit.md, "forwards"). The row
      // of an execution is looked up with `=`, which requests_execution (partial: WHERE
      // execution_id IS NOT NULL) can serve; `IS` could not use it.
      const auto completed = [&](std::string_view same_execution) {
        return "EXISTS (SELECT 1 FROM " + from("requests", "r") + " WHERE " +
               std::string(same_execution) + " AND r.workflow = t.workflow AND r.ts = t.ts AND " +
               same("r.method", "t.method") + " AND " + same("r.host", "t.host") + " AND " +
               same("r.path", "t.path") + " AND r.seq > t.seq)";
      };
      return "SELECT t.id, " + columns("forwards") +
             ", CASE WHEN t.execution_id IS NULL THEN (CASE WHEN " +
             completed("r.execution_id IS NULL") + " THEN 1 ELSE 0 END) WHEN " +
             completed("r.execution_id = t.execution_id") +
             " THEN 1 ELSE 0 END AS completed FROM (SELECT f.seq AS id, f.* FROM " +
             from("forwards", "f") + ") t" + where();
    }
    if (kind == "dns") {
      // sluice's DNS: one row per query; --host matches the queried name.
      return "SELECT t.id, " + columns("dns_queries") +
             " FROM (SELECT d.seq AS id, d.name AS host, d.* FROM " + from("dns_queries", "d") +
             ") t" + where();
    }
    if (kind == "approvals") {
      // Decided approvals of `ask` rules; --since/--until apply to when it was asked.
      return "SELECT t.seq, " + columns("approvals") + " FROM (SELECT a.asked_at AS ts, a.* FROM " +
             from("approvals", "a") + ") t" + where();
    }
    if (kind == "events") return interleaved();
    if (kind == "shadow-diff") return shadowDiff();
    return {};
  }

 private:
  static std::string columns(std::string_view table,
                             std::initializer_list<std::string_view> omit = {}) {
    return detail::columnList(*detail::findChainTable(table), "t.", omit);
  }

  /// Conditions on an event row aliased `t` (time column `ts`).
  std::string where() {
    std::string w = " WHERE 1 = 1";
    if (f_.workflow) w += " AND t.workflow = " + param(textBind(*f_.workflow));
    if (f_.execution) w += " AND t.execution_id = " + param(textBind(*f_.execution));
    if (f_.decision) w += " AND t.decision = " + param(textBind(*f_.decision));
    if (f_.host) w += " AND t.host = " + param(textBind(*f_.host));
    if (f_.since_ms) w += " AND t.ts >= " + param(intBind(*f_.since_ms));
    if (f_.until_ms) w += " AND t.ts < " + param(intBind(*f_.until_ms));
    return w;
  }

  /// Connections and requests in one list, in chain order.
  std::string interleaved() {
    std::string conn_where = where();
    std::string req_where = where();
    return "SELECT * FROM (SELECT t.seq, 'connection' AS type, t.ts, t.execution_id, t.workflow,"
           " t.decision, t.rule_id, t.reason, t.host, t.port, NULL AS method, NULL AS path,"
           " NULL AS status, t.detail, NULL AS injected_secrets FROM " +
           from("connections", "t") + conn_where +
           " UNION ALL SELECT t.seq, 'request', t.ts, t.execution_id, t.workflow, t.decision,"
           " t.rule_id, t.reason, t.host, NULL, t.method, t.path, t.status, NULL,"
           " t.injected_secrets FROM " +
           from("requests", "t") + req_where + ") u";
  }

  /// Where a row's shadow decision (`--shadow-policy`) differs from its decision: allow,
  /// fail (the policy let it through) and would_deny (learn mode: the policy denied it) are
  /// compared as allow, allow and deny; ask is a value of its own.
  static std::string shadowDiffers() {
    return " AND t.shadow_decision IS NOT NULL AND t.shadow_decision <> (CASE WHEN t.decision IN"
           " ('allow', 'fail') THEN 'allow' ELSE 'deny' END)";
  }

  /// Connections, requests and DNS rows whose shadow decision differs, in chain order.
  std::string shadowDiff() {
    const std::string conn_where = where() + shadowDiffers();
    const std::string req_where = where() + shadowDiffers();
    const std::string dns_where = where() + shadowDiffers();
    return "SELECT * FROM (SELECT t.seq, 'connection' AS type, t.ts, t.execution_id, t.workflow,"
           " t.decision, t.rule_id, t.shadow_decision, t.shadow_rule, t.reason, t.host, t.port,"
           " NULL AS method, NULL AS path FROM " +
           from("connections", "t") + conn_where +
           " UNION ALL SELECT t.seq, 'request', t.ts, t.execution_id, t.workflow, t.decision,"
           " t.rule_id, t.shadow_decision, t.shadow_rule, t.reason, t.host, NULL, t.method,"
           " t.path FROM " +
           from("requests", "t") + req_where +
           " UNION ALL SELECT t.seq, 'dns', t.ts, t.execution_id, t.workflow, t.decision,"
           " t.rule_id, t.shadow_decision, t.shadow_rule, t.reason, t.host, NULL, t.qtype, NULL"
           " FROM (SELECT d.name AS host, d.* FROM " +
           from("dns_queries", "d") + ") t" + dns_where + ") u";
  }

  const QueryFilter& f_;
  const detail::QueryDialect& d_;
  std::string node_;  // PostgreSQL: the node's parameter
  std::vector<Bind> binds_;
};

/// A table's hashed columns for `show`, leaving out `omit`.
std::string columnsOf(std::string_view table, std::initializer_list<std::string_view> omit) {
  return detail::columnList(*detail::findChainTable(table), "", omit);
}

/// The node's own SQLite store.
class SqliteReader final : public Reader::Impl {
 public:
  explicit SqliteReader(std::filesystem::path path) : path_(std::move(path)) {}

  std::expected<void, base::Error> open();
  std::expected<ResultTable, base::Error> run(std::string_view sql, const std::vector<Bind>& binds,
                                              bool format_times, bool single_statement) override;
  const detail::QueryDialect& dialect() const override { return dialect_; }

 private:
  std::expected<Stmt, base::Error> prepareReadOnly(std::string_view sql, bool single_statement);
  static int authorize(void* self, int action, const char* a, const char* b, const char* db,
                       const char* trigger);

  std::filesystem::path path_;
  detail::Db db_;
  std::string refused_;  // what the authorizer refused last, for the error message
  detail::QueryDialect dialect_;
};

int SqliteReader::authorize(void* self, int action, const char* a, const char* b,
                            const char* /*db*/, const char* /*trigger*/) {
  auto* impl = static_cast<SqliteReader*>(self);
  switch (action) {
    case SQLITE_SELECT:
    case SQLITE_READ:
    case SQLITE_FUNCTION:
    case SQLITE_RECURSIVE:
      return SQLITE_OK;
    case SQLITE_PRAGMA: {
      std::string_view name = a ? a : "";
      if (contains(kReadPragmas, name) && (b == nullptr || contains(kArgumentReadPragmas, name))) {
        return SQLITE_OK;
      }
      impl->refused_ = fmt::format("PRAGMA {}{}", name, b ? " with a value" : "");
      return SQLITE_DENY;
    }
    case SQLITE_UPDATE:
      // Table-valued functions (json_each, pragma_table_info) are eponymous virtual tables;
      // declaring one asks for UPDATE on the schema table while parsing its declaration.
      // A real UPDATE of sqlite_master is still refused: by SQLite itself (no
      // writable_schema), PRAGMA query_only, the read-only open and sqlite3_stmt_readonly.
      if (a && (std::string_view(a) == "sqlite_master" || std::string_view(a) == "sqlite_schema")) {
        return SQLITE_OK;
      }
      impl->refused_ = "statements that write, change the schema or open transactions";
      return SQLITE_DENY;
    case SQLITE_ATTACH:
      impl->refused_ = "ATTACH";
      return SQLITE_DENY;
    default:
      impl->refused_ = "statements that write, change the schema or open transactions";
      return SQLITE_DENY;
  }
}

std::expected<void, base::Error> SqliteReader::open() {
  std::error_code ec;
  if (!std::filesystem::exists(path_, ec)) {
    return std::unexpected(base::Error{base::Code::kNotFound, path_.string() + ": no such file"});
  }
  // READONLY never creates the file; query_only and the authorizer refuse writes even if
  // something slipped past the open flags.
  auto db = detail::openDb(path_, SQLITE_OPEN_READONLY, 5000);
  if (!db) return std::unexpected(db.error());
  db_ = std::move(*db);
  sqlite3* raw = db_.get();
  if (auto r = detail::checkReadable(path_, raw); !r) return r;
  if (auto r = detail::exec(path_, raw, "PRAGMA query_only=1"); !r) return r;
  sqlite3_limit(raw, SQLITE_LIMIT_ATTACHED, 0);
  sqlite3_db_config(raw, SQLITE_DBCONFIG_DEFENSIVE, 1, nullptr);
  sqlite3_db_config(raw, SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, 0, nullptr);
  sqlite3_set_authorizer(raw, &SqliteReader::authorize, this);
  return {};
}

// One read-only statement of `sql` (exactly one when `single_statement`), or why not.
std::expected<Stmt, base::Error> SqliteReader::prepareReadOnly(std::string_view sql,
                                                               bool single_statement) {
  sqlite3* raw = db_.get();
  sqlite3_stmt* s = nullptr;
  const char* tail = nullptr;
  refused_.clear();
  int rc = sqlite3_prepare_v2(raw, sql.data(), static_cast<int>(sql.size()), &s, &tail);
  Stmt stmt(s);
  if (rc != SQLITE_OK) {
    if ((rc & 0xff) == SQLITE_AUTH) {
      return std::unexpected(detail::sqliteCoded(
          base::Code::kPermissionDenied,
          fmt::format("{}: refused: the audit database is read-only here ({} are not allowed)",
                      path_.string(), refused_),
          rc));
    }
    base::Error e = detail::sqliteError(path_, raw, rc, "invalid SQL");
    if ((rc & 0xff) == SQLITE_ERROR) e.code = base::Code::kInvalidArgument;  // the caller's SQL
    return std::unexpected(std::move(e));
  }
  if (!stmt)
    return std::unexpected(
        base::Error{base::Code::kInvalidArgument, path_.string() + ": empty SQL statement"});
  if (single_statement && tail) {
    std::string_view rest(tail, static_cast<std::size_t>(sql.data() + sql.size() - tail));
    if (rest.find_first_not_of(" \t\r\n;") != std::string_view::npos) {
      return std::unexpected(base::Error{
          base::Code::kInvalidArgument, path_.string() + ": exactly one SQL statement is allowed"});
    }
  }
  if (!sqlite3_stmt_readonly(s)) {
    return std::unexpected(base::Error{base::Code::kPermissionDenied,
                                       path_.string() + ": refused: only read-only statements"});
  }
  return stmt;
}

std::expected<ResultTable, base::Error> SqliteReader::run(std::string_view sql,
                                                          const std::vector<Bind>& binds,
                                                          bool format_times,
                                                          bool single_statement) {
  auto prepared = prepareReadOnly(sql, single_statement);
  if (!prepared) return std::unexpected(prepared.error());
  Stmt& stmt = *prepared;
  sqlite3_stmt* s = stmt.get();
  sqlite3* raw = db_.get();
  int rc;
  for (std::size_t i = 0; i < binds.size(); ++i) {
    int idx = static_cast<int>(i + 1);
    if (binds[i].is_text) {
      stmt.bindText(idx, binds[i].s);
    } else {
      stmt.bindInt(idx, binds[i].i);
    }
  }
  ResultTable table;
  int n = sqlite3_column_count(s);
  std::vector<bool> time_col(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    std::string name = sqlite3_column_name(s, i);
    const detail::ColumnKind kind = detail::columnKind(name);
    table.json_columns.push_back(kind == detail::ColumnKind::kJson);
    time_col[static_cast<std::size_t>(i)] = format_times && kind == detail::ColumnKind::kTime;
    table.columns.push_back(std::move(name));
  }
  while ((rc = stmt.step()) == SQLITE_ROW) {
    std::vector<Cell> row;
    row.reserve(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) {
      switch (sqlite3_column_type(s, i)) {
        case SQLITE_INTEGER: {
          std::int64_t v = sqlite3_column_int64(s, i);
          if (time_col[static_cast<std::size_t>(i)]) {
            row.emplace_back(formatTime(v));
          } else {
            row.emplace_back(v);
          }
          break;
        }
        case SQLITE_FLOAT:
          row.emplace_back(sqlite3_column_double(s, i));
          break;
        case SQLITE_TEXT:
        case SQLITE_BLOB:
          row.emplace_back(std::string(stmt.columnText(i)));
          break;
        default:
          row.emplace_back(std::monostate{});
      }
    }
    table.rows.push_back(std::move(row));
  }
  if (rc != SQLITE_DONE)
    return std::unexpected(detail::sqliteError(path_, raw, rc, "query failed"));
  return table;
}

}  // namespace

Reader::Reader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Reader::~Reader() = default;

std::expected<std::unique_ptr<Reader>, base::Error> Reader::open(const std::filesystem::path& db) {
  auto impl = std::make_unique<SqliteReader>(db);
  if (auto r = impl->open(); !r) return std::unexpected(r.error());
  return std::unique_ptr<Reader>(new Reader(std::move(impl)));
}

std::expected<ResultTable, base::Error> Reader::sql(std::string_view statement) {
  return impl_->run(statement, {}, false, true);
}

std::expected<ResultTable, base::Error> Reader::query(const QueryFilter& f) {
  std::string kind = f.kind;
  if (kind.empty()) kind = (f.decision || f.host) ? "events" : "executions";
  if (f.decision && *f.decision != "allow" && *f.decision != "deny" && *f.decision != "fail") {
    return std::unexpected(
        base::Error{base::Code::kInvalidArgument,
                    "--decision must be allow, deny or fail, not '" + *f.decision + "'"});
  }
  if (kind == "forwards" && f.decision) {
    return std::unexpected(base::Error{base::Code::kInvalidArgument,
                                       "--decision does not apply to forwards (every forward was "
                                       "allowed; its outcome is the matching request)"});
  }
  QuerySql q(f, impl_->dialect());
  std::string sql = kind == "executions" ? q.executions() : q.events(kind);
  if (sql.empty()) {
    return std::unexpected(
        base::Error{base::Code::kInvalidArgument,
                    "unknown query kind '" + kind +
                        "' (executions, connections, requests, forwards, dns, approvals, events or "
                        "shadow-diff)"});
  }
  sql += kind == "executions" ? " ORDER BY e.seq" : " ORDER BY seq";
  if (f.limit) sql += " LIMIT " + q.param(intBind(*f.limit));
  return impl_->run(sql, q.binds(), true, false);
}

std::expected<std::optional<ExecutionDetail>, base::Error> Reader::show(std::string_view id) {
  const QueryFilter all;
  QuerySql q(all, impl_->dialect());
  const std::string id_param = q.param(textBind(std::string(id)));
  const std::string where = " WHERE t.id = " + id_param;
  const auto& binds = q.binds();
  // The receipt is read apart, unformatted; the rest as `query` shows it.
  auto exec = impl_->run("SELECT seq, " + columnsOf("executions", {"receipt"}) + ", hash FROM " +
                             q.from("executions", "t") + where,
                         binds, true, false);
  if (!exec) return std::unexpected(exec.error());
  if (exec->rows.empty()) return std::optional<ExecutionDetail>{};
  ExecutionDetail d;
  d.execution = std::move(*exec);
  auto receipt =
      impl_->run("SELECT receipt FROM " + q.from("executions", "t") + where, binds, false, false);
  if (!receipt) return std::unexpected(receipt.error());
  if (!receipt->rows.empty()) {
    if (auto* s = std::get_if<std::string>(&receipt->rows[0][0])) d.receipt_json = *s;
  }
  // The execution's connections and requests, without the columns the execution gives.
  const std::string of_exec = " WHERE t.execution_id = " + id_param;
  auto conns = impl_->run(
      "SELECT seq, " + columnsOf("connections", {"execution_id", "workflow", "policy_sha256"}) +
          " FROM " + q.from("connections", "t") + of_exec + " ORDER BY seq",
      binds, true, false);
  if (!conns) return std::unexpected(conns.error());
  d.connections = std::move(*conns);
  auto reqs = impl_->run("SELECT id, " + columnsOf("requests", {"execution_id", "workflow"}) +
                             " FROM " + q.from("requests", "t") + of_exec + " ORDER BY seq",
                         binds, true, false);
  if (!reqs) return std::unexpected(reqs.error());
  d.requests = std::move(*reqs);
  return std::optional<ExecutionDetail>{std::move(d)};
}

}  // namespace sluice::audit
