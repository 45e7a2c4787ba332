// What an audit command's --db (or `audit ship --to`) names: a SQLite file, or one node's rows in
// the central PostgreSQL store. Every audit command asks here, so they read a URI the same way
// and warn about a password in it the same way.
#pragma once

#include <expected>
#include <optional>
#include <string>

#include "sluice/audit/central.hpp"
#include "sluice/base/error.hpp"

namespace sluice::cli {

/// nullopt for a SQLite path; for a postgresql:// URI, its central target (an error when the
/// URI is malformed, or names no node and `node_required`). A URI holding a password gets one
/// warning on stderr (warnPasswordInUri).
std::expected<std::optional<audit::CentralTarget>, base::Error> centralTargetOf(
    const std::string& db, bool node_required = true);

/// Warns, once per process, when `uri` holds a password: every local user can read a command
/// line (ps, /proc/PID/cmdline), so it belongs in PGPASSWORD or ~/.pgpass. The password itself
/// is never printed.
void warnPasswordInUri(const std::string& uri);

}  // namespace sluice::cli
