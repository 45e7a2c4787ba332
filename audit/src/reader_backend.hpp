// What `Reader` (reader.hpp) runs its statements on: the node's SQLite store (reader.cpp) or one
// node's rows in the central PostgreSQL store (pg_reader.cpp). `audit query` and `show` build
// their SQL once (reader.cpp) and only the few spellings in QueryDialect differ per backend.
#pragma once

#include <cstdint>
#include <expected>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/audit/reader.hpp"
#include "sluice/base/error.hpp"

namespace sluice::audit {
namespace detail {

/// A bound parameter. (Not a std::variant: g++ 12 warns falsely about its string member.)
struct Bind {
  bool is_text = false;
  std::int64_t i = 0;
  std::string s;
};
inline Bind textBind(std::string s) { return Bind{true, 0, std::move(s)}; }
inline Bind intBind(std::int64_t i) { return Bind{false, i, {}}; }

/// Where the SQL of `audit query` and `show` differs between the backends.
struct QueryDialect {
  /// PostgreSQL: every table holds every node's rows (schemas/audit.postgresql.sql), so each
  /// table is read through the node filter, and $N parameters replace ?N.
  bool postgres = false;
  std::string node;  // PostgreSQL: whose rows
};

}  // namespace detail

class Reader::Impl {
 public:
  virtual ~Impl() = default;
  /// Runs `sql` with `binds` as its parameters 1..n. `format_times`: kTime columns (epoch ms)
  /// as RFC 3339; `single_statement`: refuse a second statement (the user's SQL).
  virtual std::expected<ResultTable, base::Error> run(std::string_view sql,
                                                      const std::vector<detail::Bind>& binds,
                                                      bool format_times, bool single_statement) = 0;
  virtual const detail::QueryDialect& dialect() const = 0;
};

}  // namespace sluice::audit
