// Read-only access for auditors (see reader.hpp): the authorizer-guarded connection, the
// filtered queries behind `sluice audit query`, and `show`.
#include "sluice/audit/reader.hpp"

#include <fmt/format.h>

#include <array>
#include <string>

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

/// Columns whose text is JSON.
bool isJsonColumn(std::string_view name) {
  return name == "argv" || name == "usage" || name == "artifacts" || name == "receipt" ||
         name == "injected_secrets";
}

/// Columns holding epoch milliseconds, shown as RFC 3339 by query and show.
bool isTimeColumn(std::string_view name) {
  return name == "started_at" || name == "ended_at" || name == "ts" || name == "loaded_at" ||
         name == "asked_at" || name == "decided_at";
}

/// A bound parameter. (Not a std::variant: g++ 12 warns falsely about its string member.)
struct Bind {
  bool is_text = false;
  std::int64_t i = 0;
  std::string s;
};
Bind textBind(std::string s) { return Bind{true, 0, std::move(s)}; }
Bind intBind(std::int64_t i) { return Bind{false, i, {}}; }

}  // namespace

class Reader::Impl {
 public:
  explicit Impl(std::filesystem::path path) : path_(std::move(path)) {}

  std::expected<void, Error> open();
  std::expected<ResultTable, Error> run(std::string_view sql, const std::vector<Bind>& binds,
                                        bool format_times, bool single_statement);
  const std::filesystem::path& path() const { return path_; }

 private:
  static int authorize(void* self, int action, const char* a, const char* b, const char* db,
                       const char* trigger);

  std::filesystem::path path_;
  detail::Db db_;
  std::string refused_;  // what the authorizer refused last, for the error message
};

int Reader::Impl::authorize(void* self, int action, const char* a, const char* b,
                            const char* /*db*/, const char* /*trigger*/) {
  auto* impl = static_cast<Impl*>(self);
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

std::expected<void, Error> Reader::Impl::open() {
  std::error_code ec;
  if (!std::filesystem::exists(path_, ec)) {
    return std::unexpected(Error{path_.string() + ": no such file"});
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
  sqlite3_set_authorizer(raw, &Impl::authorize, this);
  return {};
}

std::expected<ResultTable, Error> Reader::Impl::run(std::string_view sql,
                                                    const std::vector<Bind>& binds,
                                                    bool format_times, bool single_statement) {
  sqlite3* raw = db_.get();
  sqlite3_stmt* s = nullptr;
  const char* tail = nullptr;
  refused_.clear();
  int rc = sqlite3_prepare_v2(raw, sql.data(), static_cast<int>(sql.size()), &s, &tail);
  Stmt stmt(s);
  if (rc != SQLITE_OK) {
    if ((rc & 0xff) == SQLITE_AUTH) {
      return std::unexpected(Error{
          fmt::format("{}: refused: the audit database is read-only here ({} are not allowed)",
                      path_.string(), refused_),
          rc});
    }
    return std::unexpected(detail::sqliteError(path_, raw, rc, "invalid SQL"));
  }
  if (!stmt) return std::unexpected(Error{path_.string() + ": empty SQL statement"});
  if (single_statement && tail) {
    std::string_view rest(tail, static_cast<std::size_t>(sql.data() + sql.size() - tail));
    if (rest.find_first_not_of(" \t\r\n;") != std::string_view::npos) {
      return std::unexpected(Error{path_.string() + ": exactly one SQL statement is allowed"});
    }
  }
  if (!sqlite3_stmt_readonly(s)) {
    return std::unexpected(Error{path_.string() + ": refused: only read-only statements"});
  }
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
    table.json_columns.push_back(isJsonColumn(name));
    time_col[static_cast<std::size_t>(i)] = format_times && isTimeColumn(name);
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

Reader::Reader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Reader::~Reader() = default;

std::expected<std::unique_ptr<Reader>, Error> Reader::open(const std::filesystem::path& db) {
  auto impl = std::make_unique<Impl>(db);
  if (auto r = impl->open(); !r) return std::unexpected(r.error());
  return std::unique_ptr<Reader>(new Reader(std::move(impl)));
}

std::expected<ResultTable, Error> Reader::sql(std::string_view statement) {
  return impl_->run(statement, {}, false, true);
}

std::expected<ResultTable, Error> Reader::query(const QueryFilter& f) {
  std::string kind = f.kind;
  if (kind.empty()) kind = (f.decision || f.host) ? "events" : "executions";
  if (f.decision && *f.decision != "allow" && *f.decision != "deny") {
    return std::unexpected(Error{"--decision must be allow or deny, not '" + *f.decision + "'"});
  }
  std::vector<Bind> binds;
  auto param = [&](Bind b) {
    binds.push_back(std::move(b));
    return fmt::format("?{}", binds.size());
  };
  // Conditions on a connections/requests row aliased `t` (time column `ts`).
  auto eventWhere = [&] {
    std::string w = " WHERE 1";
    if (f.workflow) w += " AND t.workflow = " + param(textBind(*f.workflow));
    if (f.execution) w += " AND t.execution_id = " + param(textBind(*f.execution));
    if (f.decision) w += " AND t.decision = " + param(textBind(*f.decision));
    if (f.host) w += " AND t.host = " + param(textBind(*f.host));
    if (f.since_ms) w += " AND t.ts >= " + param(intBind(*f.since_ms));
    if (f.until_ms) w += " AND t.ts < " + param(intBind(*f.until_ms));
    return w;
  };
  std::string sql;
  if (kind == "executions") {
    sql =
        "SELECT e.id, e.workflow, e.started_at, e.ended_at - e.started_at AS duration_ms,"
        " e.exit_code, e.signal, e.limit_hit,"
        " (SELECT count(*) FROM connections c WHERE c.execution_id = e.id"
        "   AND c.decision = 'allow') AS allowed,"
        " (SELECT count(*) FROM connections c WHERE c.execution_id = e.id"
        "   AND c.decision = 'deny') AS denied,"
        " (SELECT coalesce(sum(c.bytes_up), 0) FROM connections c"
        "   WHERE c.execution_id = e.id) AS bytes_out,"
        " (SELECT coalesce(sum(c.bytes_down), 0) FROM connections c"
        "   WHERE c.execution_id = e.id) AS bytes_in,"
        " (SELECT group_concat(h, ' ') FROM (SELECT DISTINCT c.host || ':' || c.port AS h"
        "   FROM connections c WHERE c.execution_id = e.id ORDER BY h)) AS hosts"
        " FROM executions e WHERE 1";
    if (f.workflow) sql += " AND e.workflow = " + param(textBind(*f.workflow));
    if (f.execution) sql += " AND e.id = " + param(textBind(*f.execution));
    if (f.since_ms) sql += " AND e.started_at >= " + param(intBind(*f.since_ms));
    if (f.until_ms) sql += " AND e.started_at < " + param(intBind(*f.until_ms));
    // --decision and --host together mean one connection with both (e.g. allowed to host Y).
    if (f.decision || f.host) {
      sql += " AND EXISTS (SELECT 1 FROM connections c WHERE c.execution_id = e.id";
      if (f.decision) sql += " AND c.decision = " + param(textBind(*f.decision));
      if (f.host) sql += " AND c.host = " + param(textBind(*f.host));
      sql += ")";
    }
  } else if (kind == "connections") {
    sql =
        "SELECT t.seq, t.id, t.execution_id, t.workflow, t.ts, t.kind, t.host, t.port,"
        " t.resolved_ip, t.decision, t.rule_id, t.reason, t.detail, t.tls, t.bytes_up,"
        " t.bytes_down, t.duration_ms FROM connections t";
    sql += eventWhere();
  } else if (kind == "requests") {
    sql =
        "SELECT t.id, t.connection_id, t.execution_id, t.workflow, t.ts, t.method, t.host,"
        " t.path, t.status, t.decision, t.rule_id, t.reason, t.injected_secrets"
        " FROM requests t";
    sql += eventWhere();
  } else if (kind == "forwards") {
    if (f.decision) {
      return std::unexpected(
          Error{"--decision does not apply to forwards (every forward was "
                "allowed; its outcome is the matching request)"});
    }
    // `completed`: the exchange's requests row exists (docs/audit.md, "forwards").
    sql =
        "SELECT t.id, t.connection_id, t.execution_id, t.workflow, t.ts, t.method, t.host,"
        " t.path, t.rule_id, t.attempt, t.injected_secrets,"
        " EXISTS (SELECT 1 FROM requests r WHERE r.execution_id IS t.execution_id"
        "   AND r.workflow = t.workflow AND r.ts = t.ts AND r.method IS t.method"
        "   AND r.host IS t.host AND r.path IS t.path AND r.seq > t.seq) AS completed"
        " FROM (SELECT seq AS id, * FROM forwards) t";
    sql += eventWhere();
  } else if (kind == "dns") {
    // sluice's DNS: one row per query; --host matches the queried name.
    sql =
        "SELECT t.id, t.execution_id, t.workflow, t.ts, t.name, t.qtype, t.answer, t.decision,"
        " t.rule_id, t.reason FROM (SELECT seq AS id, name AS host, * FROM dns_queries) t";
    sql += eventWhere();
  } else if (kind == "approvals") {
    // Decided approvals of `ask` rules; --since/--until apply to when it was asked.
    sql =
        "SELECT t.seq, t.id, t.execution_id, t.session_id, t.workflow, t.caller, t.rule_id,"
        " t.host, t.port, t.method, t.path, t.decision, t.reason, t.scope, t.decided_by,"
        " t.asked_at, t.decided_at FROM (SELECT asked_at AS ts, * FROM approvals) t";
    sql += eventWhere();
  } else if (kind == "events") {
    std::string conn_where = eventWhere();
    std::string req_where = eventWhere();
    sql =
        "SELECT * FROM (SELECT t.seq, 'connection' AS type, t.ts, t.execution_id, t.workflow,"
        " t.decision, t.rule_id, t.reason, t.host, t.port, NULL AS method, NULL AS path,"
        " NULL AS status, t.detail, NULL AS injected_secrets FROM connections t" +
        conn_where +
        " UNION ALL SELECT t.seq, 'request', t.ts, t.execution_id, t.workflow, t.decision,"
        " t.rule_id, t.reason, t.host, NULL, t.method, t.path, t.status, NULL,"
        " t.injected_secrets FROM requests t" +
        req_where + ")";
  } else {
    return std::unexpected(
        Error{"unknown query kind '" + kind +
              "' (executions, connections, requests, forwards, dns, approvals or events)"});
  }
  if (kind == "executions") {
    sql += " ORDER BY e.seq";
  } else {
    sql += " ORDER BY seq";
  }
  if (f.limit) sql += " LIMIT " + param(intBind(*f.limit));
  return impl_->run(sql, binds, true, false);
}

std::expected<std::optional<ExecutionDetail>, Error> Reader::show(std::string_view id) {
  std::vector<Bind> binds{textBind(std::string(id))};
  auto exec = impl_->run(
      "SELECT seq, id, workflow, policy_sha256, argv, started_at, ended_at, exit_code, signal,"
      " limit_hit, usage, stdout_bytes, stderr_bytes, stdout_truncated, stderr_truncated,"
      " artifacts, hash FROM executions WHERE id = ?1",
      binds, true, false);
  if (!exec) return std::unexpected(exec.error());
  if (exec->rows.empty()) return std::optional<ExecutionDetail>{};
  ExecutionDetail d;
  d.execution = std::move(*exec);
  auto receipt = impl_->run("SELECT receipt FROM executions WHERE id = ?1", binds, false, false);
  if (!receipt) return std::unexpected(receipt.error());
  if (!receipt->rows.empty()) {
    if (auto* s = std::get_if<std::string>(&receipt->rows[0][0])) d.receipt_json = *s;
  }
  auto conns = impl_->run(
      "SELECT seq, id, ts, kind, host, port, resolved_ip, decision, rule_id, reason, detail, tls,"
      " bytes_up, bytes_down, duration_ms FROM connections WHERE execution_id = ?1 ORDER BY seq",
      binds, true, false);
  if (!conns) return std::unexpected(conns.error());
  d.connections = std::move(*conns);
  auto reqs = impl_->run(
      "SELECT id, connection_id, ts, method, host, path, status, decision, rule_id, reason,"
      " injected_secrets FROM requests WHERE execution_id = ?1 ORDER BY seq",
      binds, true, false);
  if (!reqs) return std::unexpected(reqs.error());
  d.requests = std::move(*reqs);
  return std::optional<ExecutionDetail>{std::move(d)};
}

}  // namespace sluice::audit
