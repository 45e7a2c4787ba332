// RAII wrappers over SQLite and error formatting; see sqlite_db.hpp.
#include "sqlite_db.hpp"

#include <fmt/format.h>

#include <cstring>
#include <utility>

namespace sluice::audit::detail {

base::Code codeOf(int rc) {
  switch (rc & 0xff) {
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT:
      return base::Code::kIntegrity;
    case SQLITE_CONSTRAINT:
      return base::Code::kConflict;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return base::Code::kUnavailable;
    case SQLITE_AUTH:
    case SQLITE_PERM:
      return base::Code::kPermissionDenied;
    default:
      return base::Code::kIo;
  }
}

base::Error sqliteCoded(base::Code code, std::string message, int rc) {
  base::Error e{code, std::move(message)};
  e.cause_code = rc;
  return e;
}

base::Error sqliteError(const std::filesystem::path& path, sqlite3* db, int rc,
                        std::string_view what) {
  std::string msg = path.string();
  msg += ": ";
  int primary = rc & 0xff;
  // Whatever we were doing, the file itself is the problem: say so first.
  msg +=
      (primary == SQLITE_NOTADB || primary == SQLITE_CORRUPT) ? "corrupt or not a database" : what;
  msg += ": ";
  // sqlite3_errmsg is more specific than sqlite3_errstr when the connection exists (it names
  // the constraint, the file-level cause, ...).
  msg += db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  // The OS-level cause (EACCES, EROFS, ENOSPC, ...) is only reachable through the connection;
  // SQLite's own text ("unable to open database file") does not say which.
  int sys = 0;
  if (db) {
    sys = sqlite3_system_errno(db);
    if (sys != 0 && (rc & 0xff) != SQLITE_CONSTRAINT && (rc & 0xff) != SQLITE_BUSY) {
      msg += " (";
      msg += std::strerror(sys);
      msg += ")";
    } else {
      sys = 0;  // stale: left over from an earlier call
    }
  }
  base::Error e = sqliteCoded(codeOf(rc), std::move(msg), rc);
  e.sys_errno = sys;
  return e;
}

Db& Db::operator=(Db&& other) noexcept {
  if (this != &other) {
    sqlite3_close_v2(db_);
    db_ = std::exchange(other.db_, nullptr);
  }
  return *this;
}

Db::~Db() { sqlite3_close_v2(db_); }

std::expected<Db, base::Error> openDb(const std::filesystem::path& path, int flags,
                                      int busy_timeout_ms) {
  sqlite3* raw = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &raw, flags, nullptr);
  Db db(raw);
  if (rc != SQLITE_OK) return std::unexpected(sqliteError(path, raw, rc, "cannot open"));
  sqlite3_extended_result_codes(raw, 1);
  sqlite3_busy_timeout(raw, busy_timeout_ms);
  return db;
}

Stmt& Stmt::operator=(Stmt&& other) noexcept {
  if (this != &other) {
    sqlite3_finalize(s_);
    s_ = std::exchange(other.s_, nullptr);
  }
  return *this;
}

std::string_view Stmt::columnText(int i) const {
  const unsigned char* p = sqlite3_column_text(s_, i);
  if (!p) return {};
  return {reinterpret_cast<const char*>(p), static_cast<std::size_t>(sqlite3_column_bytes(s_, i))};
}

std::expected<Stmt, base::Error> prepare(const std::filesystem::path& path, sqlite3* db,
                                         std::string_view sql) {
  sqlite3_stmt* s = nullptr;
  int rc = sqlite3_prepare_v3(db, sql.data(), static_cast<int>(sql.size()),
                              SQLITE_PREPARE_PERSISTENT, &s, nullptr);
  if (rc != SQLITE_OK) return std::unexpected(sqliteError(path, db, rc, "cannot prepare"));
  return Stmt(s);
}

std::expected<Stmt, base::Error> executionRow(const std::filesystem::path& path, sqlite3* db,
                                              std::string_view sql, std::string_view execution_id) {
  auto row = prepare(path, db, sql);
  if (!row) return std::unexpected(row.error());
  row->bindText(1, execution_id);
  if (row->step() != SQLITE_ROW)
    return std::unexpected(
        base::Error{base::Code::kNotFound,
                    fmt::format("{}: no execution with id '{}'", path.string(), execution_id)});
  return row;
}

std::expected<void, base::Error> exec(const std::filesystem::path& path, sqlite3* db,
                                      const std::string& sql) {
  char* err = nullptr;
  int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  sqlite3_free(err);
  if (rc != SQLITE_OK) return std::unexpected(sqliteError(path, db, rc, "cannot write"));
  return {};
}

std::expected<std::int64_t, base::Error> queryInt(const std::filesystem::path& path, sqlite3* db,
                                                  std::string_view sql) {
  auto stmt = prepare(path, db, sql);
  if (!stmt) return std::unexpected(stmt.error());
  int rc = stmt->step();
  if (rc == SQLITE_ROW) return stmt->columnInt(0);
  if (rc == SQLITE_DONE) return 0;
  return std::unexpected(sqliteError(path, db, rc, "cannot read"));
}

}  // namespace sluice::audit::detail
