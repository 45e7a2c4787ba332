// Thin RAII wrappers over SQLite's C API (connection, prepared statement) and the one place
// that turns SQLite result codes into Errors naming the database path and the OS cause.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <expected>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>

#include "sluice/audit/store.hpp"

namespace sluice::audit::detail {

/// The code of an error SQLite reported as `rc`: kIntegrity for a corrupt file or not a
/// database, kConflict for a constraint, kUnavailable for a lock held too long, kPermissionDenied
/// for an authorizer's refusal, kIo for the rest (I/O, disk full, read-only, cannot open).
base::Code codeOf(int rc);

/// An Error with `code` and `message` carrying SQLite's extended result code `rc`.
base::Error sqliteCoded(base::Code code, std::string message, int rc);

/// "PATH: what: sqlite message (OS errno text)". `db` may be null (open failures). The code is
/// codeOf(rc), cause_code the extended result code, sys_errno the OS error SQLite saw.
base::Error sqliteError(const std::filesystem::path& path, sqlite3* db, int rc,
                        std::string_view what);

/// An owned sqlite3 connection.
class Db {
 public:
  Db() = default;
  explicit Db(sqlite3* db) : db_(db) {}
  Db(Db&& other) noexcept : db_(std::exchange(other.db_, nullptr)) {}
  Db& operator=(Db&& other) noexcept;
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;
  ~Db();

  sqlite3* get() const { return db_; }
  explicit operator bool() const { return db_ != nullptr; }

 private:
  sqlite3* db_ = nullptr;
};

/// Opens `path` with `flags` (SQLITE_OPEN_*), sets the busy timeout and extended result codes.
std::expected<Db, base::Error> openDb(const std::filesystem::path& path, int flags,
                                      int busy_timeout_ms);

/// An owned prepared statement.
class Stmt {
 public:
  Stmt() = default;
  explicit Stmt(sqlite3_stmt* s) : s_(s) {}
  Stmt(Stmt&& other) noexcept : s_(std::exchange(other.s_, nullptr)) {}
  Stmt& operator=(Stmt&& other) noexcept;
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  ~Stmt() { sqlite3_finalize(s_); }

  sqlite3_stmt* get() const { return s_; }
  explicit operator bool() const { return s_ != nullptr; }

  /// Binds text without copying: the bytes must outlive the next step()/reset().
  void bindText(int i, std::string_view v) {
    sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_STATIC);
  }
  void bindInt(int i, std::int64_t v) { sqlite3_bind_int64(s_, i, v); }
  void bindNull(int i) { sqlite3_bind_null(s_, i); }
  int step() { return sqlite3_step(s_); }
  /// Every user rebinds all parameters before the next step, so bindings are not cleared.
  void reset() { sqlite3_reset(s_); }
  std::string_view columnText(int i) const;
  std::int64_t columnInt(int i) const { return sqlite3_column_int64(s_, i); }

 private:
  sqlite3_stmt* s_ = nullptr;
};

std::expected<Stmt, base::Error> prepare(const std::filesystem::path& path, sqlite3* db,
                                         std::string_view sql);

/// Prepares `sql` (one `?1` parameter: an execution id), binds `execution_id` and steps to its
/// row; kNotFound "DB: no execution with id 'ID'" when there is none.
std::expected<Stmt, base::Error> executionRow(const std::filesystem::path& path, sqlite3* db,
                                              std::string_view sql, std::string_view execution_id);

/// Runs one or more statements that return no rows.
std::expected<void, base::Error> exec(const std::filesystem::path& path, sqlite3* db,
                                      const std::string& sql);

/// Runs a single-value query (e.g. a PRAGMA) and returns the first column of the first row.
std::expected<std::int64_t, base::Error> queryInt(const std::filesystem::path& path, sqlite3* db,
                                                  std::string_view sql);

}  // namespace sluice::audit::detail
