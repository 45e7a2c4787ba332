// `sluice audit query|show|sql --db 'postgresql://...?node=N'`: the Reader backend over the
// central PostgreSQL store. The statements are reader.cpp's (QuerySql), so the output is the
// SQLite store's row for row; this file only runs them and converts the cells.
#include <charconv>
#include <cstdlib>
#include <string>
#include <vector>

#include "pg_conn.hpp"
#include "reader_backend.hpp"
#include "rows.hpp"
#include "sluice/audit/central.hpp"

namespace sluice::audit {
namespace {

/// Cell (row, col) of a result as the SQLite reader gives it: NULL, integer (an epoch-ms time
/// as RFC 3339 when `format_time`), real or text.
Cell cellOf(const PGresult* r, int row, int col, bool format_time) {
  if (PQgetisnull(r, row, col)) return std::monostate{};
  const char* v = PQgetvalue(r, row, col);
  const auto len = static_cast<std::size_t>(PQgetlength(r, row, col));
  switch (PQftype(r, col)) {
    case 20:  // int8
    case 21:  // int2
    case 23:  // int4
    {
      std::int64_t n = 0;
      std::from_chars(v, v + len, n);
      if (format_time) return formatTime(n);
      return n;
    }
    case 700:  // float4
    case 701:  // float8
      return std::strtod(v, nullptr);
    default:
      return std::string(v, len);
  }
}

/// The rows of a result with their columns' kinds (reader.hpp, ResultTable).
ResultTable tableOf(const PGresult* r, bool format_times) {
  ResultTable table;
  std::vector<bool> time_col;
  for (int i = 0; i < PQnfields(r); ++i) {
    table.columns.emplace_back(PQfname(r, i));
    const detail::ColumnKind kind = detail::columnKind(table.columns.back());
    table.json_columns.push_back(kind == detail::ColumnKind::kJson);
    time_col.push_back(format_times && kind == detail::ColumnKind::kTime);
  }
  for (int row = 0; row < PQntuples(r); ++row) {
    std::vector<Cell> cells;
    for (int col = 0; col < PQnfields(r); ++col)
      cells.push_back(cellOf(r, row, col, time_col[static_cast<std::size_t>(col)]));
    table.rows.push_back(std::move(cells));
  }
  return table;
}

class PgReader final : public Reader::Impl {
 public:
  explicit PgReader(const CentralTarget& target) { dialect_ = {true, target.node}; }

  std::expected<void, base::Error> open(const CentralTarget& target) {
    auto c = detail::pgConnect(target.conninfo);
    if (!c) return std::unexpected(c.error());
    conn_ = std::move(*c);
    // READ ONLY: the server refuses writes. One snapshot for all of `show`'s statements.
    if (auto r = detail::pgExec(conn_.get(), "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"); !r)
      return std::unexpected(r.error());
    return {};
  }

  // PQexecParams runs exactly one statement (the server refuses a second one after ';').
  std::expected<ResultTable, base::Error> run(std::string_view sql,
                                              const std::vector<detail::Bind>& binds,
                                              bool format_times,
                                              bool /*single_statement*/) override {
    std::vector<std::string> text;
    for (const auto& b : binds) text.push_back(b.is_text ? b.s : std::to_string(b.i));
    std::vector<const char*> values;
    for (const auto& t : text) values.push_back(t.c_str());
    const std::string statement(sql);
    detail::PgResult res(PQexecParams(conn_.get(), statement.c_str(),
                                      static_cast<int>(values.size()), nullptr, values.data(),
                                      nullptr, nullptr, 0));
    if (!res || PQresultStatus(res.get()) != PGRES_TUPLES_OK)
      return std::unexpected(detail::pgError(conn_.get(), "sql"));
    return tableOf(res.get(), format_times);
  }

  const detail::QueryDialect& dialect() const override { return dialect_; }

 private:
  detail::PgConn conn_;
  detail::QueryDialect dialect_;
};

}  // namespace

std::expected<std::unique_ptr<Reader>, base::Error> openCentralReader(const CentralTarget& target) {
  auto impl = std::make_unique<PgReader>(target);
  if (auto r = impl->open(target); !r) return std::unexpected(r.error());
  return std::make_unique<Reader>(std::move(impl));
}

}  // namespace sluice::audit
