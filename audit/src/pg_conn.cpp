// libpq wrappers; see pg_conn.hpp.
#include "pg_conn.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "sluice/audit/central.hpp"

namespace sluice::audit::detail {

base::Error pgError(PGconn* c, std::string_view what) {
  std::string msg = c ? PQerrorMessage(c) : libpqMissing();
  if (msg.empty()) msg = "out of memory";
  while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
  return base::Error{base::Code::kIo, fmt::format("postgresql: {}: {}", what, msg)};
}

namespace {

/// The secrets a connection string names: a URI's user:PASSWORD@ (the userinfo, which libpq
/// ends at the first '@' or '/', so an '@' in a later parameter does not open one) and the
/// value of every password= and sslpassword= parameter, URI or keyword form.
std::vector<std::string> secretsIn(std::string_view conninfo) {
  std::vector<std::string> out;
  if (const auto scheme = conninfo.find("://"); scheme != std::string_view::npos) {
    const std::string_view rest = conninfo.substr(scheme + 3);
    const auto end = rest.find_first_of("@/");
    if (end != std::string_view::npos && rest[end] == '@') {
      if (const auto colon = rest.substr(0, end).find(':'); colon != std::string_view::npos)
        out.emplace_back(rest.substr(colon + 1, end - colon - 1));
    }
  }
  for (auto p = conninfo.find("password="); p != std::string_view::npos;
       p = conninfo.find("password=", p + 9)) {
    std::string_view v = conninfo.substr(p + 9);
    // A keyword-form value may be quoted ('a b'): everything up to the closing quote.
    const bool quoted = v.starts_with('\'');
    if (quoted) v.remove_prefix(1);
    out.emplace_back(v.substr(0, v.find_first_of(quoted ? "'" : "& ")));
  }
  return out;
}

/// `e` with every copy of the connection string's secrets replaced: libpq's messages quote
/// parts of a malformed URI, which may be the password.
base::Error redacted(base::Error e, std::string_view conninfo) {
  std::vector<std::string> secrets = secretsIn(conninfo);
  // Longest first: a secret that contains another is replaced whole.
  std::sort(secrets.begin(), secrets.end(),
            [](const auto& a, const auto& b) { return a.size() > b.size(); });
  for (const std::string& secret : secrets) {
    if (secret.empty()) continue;
    for (auto at = e.message.find(secret); at != std::string::npos;
         at = e.message.find(secret, at + 3))
      e.message.replace(at, secret.size(), "***");
  }
  return e;
}

}  // namespace

}  // namespace sluice::audit::detail

namespace sluice::audit {

bool conninfoHoldsSecret(std::string_view conninfo) {
  const auto secrets = detail::secretsIn(conninfo);
  return std::any_of(secrets.begin(), secrets.end(), [](const auto& s) { return !s.empty(); });
}

}  // namespace sluice::audit

namespace sluice::audit::detail {

std::expected<PgConn, base::Error> pgConnect(const std::string& conninfo) {
  PgConn c(PQconnectdb(conninfo.c_str()));
  if (!c || PQstatus(c.get()) != CONNECTION_OK)
    return std::unexpected(redacted(pgError(c.get(), "cannot connect"), conninfo));
  // The server's notices ("relation ... already exists, skipping") are not the user's business.
  PQsetNoticeProcessor(
      c.get(), [](void*, const char*) {}, nullptr);
  return c;
}

std::expected<PgResult, base::Error> pgExec(PGconn* c, const std::string& sql,
                                            const std::vector<const char*>& params) {
  // PQexec runs a script of several statements (the schema); PQexecParams only one.
  PgResult r(params.empty() ? PQexec(c, sql.c_str())
                            : PQexecParams(c, sql.c_str(), static_cast<int>(params.size()), nullptr,
                                           params.data(), nullptr, nullptr, 0));
  const ExecStatusType st = r ? PQresultStatus(r.get()) : PGRES_FATAL_ERROR;
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
    return std::unexpected(pgError(c, sql.starts_with("--")
                                          ? std::string("creating the schema")
                                          : sql.substr(0, sql.find_first_of("(\n"))));
  return r;
}

std::expected<void, base::Error> pgCopy(PGconn* c, const std::string& target,
                                        const std::string& data) {
  const std::string sql = "COPY " + target + " FROM STDIN";
  PgResult start(PQexec(c, sql.c_str()));
  if (!start || PQresultStatus(start.get()) != PGRES_COPY_IN)
    return std::unexpected(pgError(c, sql));
  if (PQputCopyData(c, data.data(), static_cast<int>(data.size())) != 1 ||
      PQputCopyEnd(c, nullptr) != 1)
    return std::unexpected(pgError(c, sql));
  PgResult end(PQgetResult(c));
  const bool ok = end && PQresultStatus(end.get()) == PGRES_COMMAND_OK;
  while (PgResult more{PQgetResult(c)}) {
  }
  if (!ok) return std::unexpected(pgError(c, sql));
  return {};
}

void pgCopyEscape(std::string& out, std::string_view v) {
  for (char ch : v) {
    switch (ch) {
      case '\\':
        out += "\\\\";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        out += ch;
    }
  }
}

std::string pgIdent(std::string_view name) {
  std::string out = "\"";
  for (char ch : name) {
    if (ch == '"') out += '"';
    out += ch;
  }
  return out + "\"";
}

}  // namespace sluice::audit::detail
