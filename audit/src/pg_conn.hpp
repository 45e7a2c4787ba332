// Thin RAII wrappers over libpq (connection, result) for the central audit store.
#pragma once

#include <libpq-fe.h>

#include <expected>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/base/error.hpp"

namespace sluice::audit::detail {

struct PgConnClose {
  void operator()(PGconn* c) const { PQfinish(c); }
};
struct PgResultClear {
  void operator()(PGresult* r) const { PQclear(r); }
};
using PgConn = std::unique_ptr<PGconn, PgConnClose>;
using PgResult = std::unique_ptr<PGresult, PgResultClear>;

/// Connects; the error names what failed without the connection string (it may hold a password).
std::expected<PgConn, base::Error> pgConnect(const std::string& conninfo);

/// Runs `sql` with text parameters (a null pointer is NULL); the result must be
/// PGRES_COMMAND_OK or PGRES_TUPLES_OK.
std::expected<PgResult, base::Error> pgExec(PGconn* c, const std::string& sql,
                                            const std::vector<const char*>& params = {});

/// Sends `data` (COPY text format lines) to `COPY <target> FROM STDIN`.
std::expected<void, base::Error> pgCopy(PGconn* c, const std::string& target,
                                        const std::string& data);

/// Appends `v` to `out` escaped for COPY's text format.
void pgCopyEscape(std::string& out, std::string_view v);

/// "what: <the server's message>" as a kIo error.
base::Error pgError(PGconn* c, std::string_view what);

/// Why libpq could not be loaded (pg_libpq.cpp loads it when first used); empty when it was.
std::string libpqMissing();

/// `name` quoted as an SQL identifier.
std::string pgIdent(std::string_view name);

}  // namespace sluice::audit::detail
