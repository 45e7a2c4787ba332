// Schema creation, version checks and migrations (PRAGMA user_version / application_id).
#pragma once

#include <sqlite3.h>

#include <expected>
#include <filesystem>

#include "sluice/audit/store.hpp"
#include "sqlite_db.hpp"

namespace sluice::audit::detail {

/// PRAGMA application_id of a sluice audit database ("SLCE").
inline constexpr std::int64_t kApplicationId = 0x534C4345;

/// For the writer: inside its own IMMEDIATE transaction, creates the schema in an empty
/// database, migrates an older sluice database, refuses a newer or foreign one.
std::expected<void, base::Error> initOrMigrate(const std::filesystem::path& path, sqlite3* db);

/// For readers (verify, query, sql): refuses anything but a sluice database of the current
/// version (readers never migrate).
std::expected<void, base::Error> checkReadable(const std::filesystem::path& path, sqlite3* db);

/// For the readers that walk the chain (verify, export, prove, attest): the database at `path`
/// opened read-only (never created), checked with checkReadable, inside one read transaction,
/// so they see a consistent snapshot while a writer keeps appending.
std::expected<Db, base::Error> openReadSnapshot(const std::filesystem::path& path);

}  // namespace sluice::audit::detail
