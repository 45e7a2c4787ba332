// Recorded rows read back a page at a time (history.hpp).
#include "sluice/replay/history.hpp"

#include <variant>

namespace sluice::replay {

namespace {

// Rows per page: bounded memory whatever the store's size, few enough statements to be quick.
constexpr int kPageRows = 20000;

std::string sqlQuoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

std::string text(const audit::Cell& c) {
  if (const auto* s = std::get_if<std::string>(&c)) return *s;
  if (const auto* i = std::get_if<std::int64_t>(&c)) return std::to_string(*i);
  return {};
}

std::int64_t integer(const audit::Cell& c) {
  if (const auto* i = std::get_if<std::int64_t>(&c)) return *i;
  return 0;
}

// The scope as a WHERE clause over a table with execution_id, workflow and `ts_column`.
std::string scopeClause(const Scope& s, const char* ts_column) {
  std::string where;
  auto add = [&](const std::string& cond) { where += (where.empty() ? "" : " AND ") + cond; };
  if (!s.executions.empty()) {
    std::string list;
    for (const auto& e : s.executions) list += (list.empty() ? "" : ",") + sqlQuoted(e);
    add("execution_id IN (" + list + ")");
  }
  // `+` keeps SQLite off the (workflow, ts) index: with it every page would sort all of the
  // workflow's rows after the last seq again; the walk in seq order reads each row once.
  if (s.workflow) add("+workflow = " + sqlQuoted(*s.workflow));
  if (s.since_ms && ts_column)
    add("+" + std::string(ts_column) + " >= " + std::to_string(*s.since_ms));
  return where;
}

}  // namespace

base::Result<History> History::open(const std::filesystem::path& db) {
  auto reader = audit::Reader::open(db);
  if (!reader) return std::unexpected(reader.error());
  return History(std::move(*reader));
}

base::Result<void> History::pages(const std::string& select, const std::string& where,
                                  const std::function<void(const std::vector<audit::Cell>&)>& fn) {
  std::int64_t after = 0;
  for (;;) {
    // The first column is seq: each page starts after the last one seen (an index walk).
    const std::string sql = select + " WHERE seq > " + std::to_string(after) +
                            (where.empty() ? "" : " AND " + where) + " ORDER BY seq LIMIT " +
                            std::to_string(kPageRows);
    auto page = reader_->sql(sql);
    if (!page) return std::unexpected(page.error());
    for (const auto& row : page->rows) fn(row);
    if (page->rows.size() < static_cast<std::size_t>(kPageRows)) return {};
    after = integer(page->rows.back()[0]);
  }
}

base::Result<void> History::eachConnection(const Scope& scope, bool ignore_since,
                                           const std::function<void(const ConnectionRow&)>& fn) {
  return pages(
      "SELECT seq, ts, id, execution_id, workflow, policy_sha256, kind, host, port, resolved_ip, "
      "decision, rule_id, reason, detail, tls, policy_generation FROM connections",
      scopeClause(scope, ignore_since ? nullptr : "ts"), [&](const std::vector<audit::Cell>& c) {
        ConnectionRow r{integer(c[0]),
                        integer(c[1]),
                        text(c[2]),
                        text(c[3]),
                        text(c[4]),
                        text(c[5]),
                        text(c[6]),
                        text(c[7]),
                        static_cast<std::uint16_t>(integer(c[8])),
                        text(c[9]),
                        text(c[10]),
                        text(c[11]),
                        text(c[12]),
                        text(c[13]),
                        text(c[14]),
                        static_cast<std::uint64_t>(integer(c[15]))};
        fn(r);
      });
}

base::Result<void> History::eachRequest(const Scope& scope,
                                        const std::function<void(const RequestRow&)>& fn) {
  return pages(
      "SELECT seq, connection_id, execution_id, workflow, method, host, path, decision, rule_id, "
      "reason, policy_generation FROM requests",
      scopeClause(scope, "ts"), [&](const std::vector<audit::Cell>& c) {
        RequestRow r{integer(c[0]),
                     text(c[1]),
                     text(c[2]),
                     text(c[3]),
                     text(c[4]),
                     text(c[5]),
                     text(c[6]),
                     text(c[7]),
                     text(c[8]),
                     text(c[9]),
                     static_cast<std::uint64_t>(integer(c[10]))};
        fn(r);
      });
}

base::Result<void> History::eachDns(const Scope& scope,
                                    const std::function<void(const DnsRow&)>& fn) {
  return pages(
      "SELECT seq, execution_id, workflow, name, qtype, decision, rule_id, reason FROM "
      "dns_queries",
      scopeClause(scope, "ts"), [&](const std::vector<audit::Cell>& c) {
        DnsRow r{integer(c[0]), text(c[1]), text(c[2]), text(c[3]),
                 text(c[4]),    text(c[5]), text(c[6]), text(c[7])};
        fn(r);
      });
}

base::Result<std::optional<std::string>> History::policyText(const std::string& sha256) {
  auto t = reader_->sql("SELECT yaml FROM policies WHERE sha256 = " + sqlQuoted(sha256));
  if (!t) return std::unexpected(t.error());
  if (t->rows.empty()) return std::optional<std::string>();
  return std::optional<std::string>(text(t->rows[0][0]));
}

base::Result<std::string> History::executionPolicy(const std::string& execution_id) {
  auto t =
      reader_->sql("SELECT policy_sha256 FROM executions WHERE id = " + sqlQuoted(execution_id));
  if (!t) return std::unexpected(t.error());
  return t->rows.empty() ? std::string() : text(t->rows[0][0]);
}

base::Result<bool> History::hasExecution(const std::string& execution_id) {
  auto t = reader_->sql("SELECT 1 FROM executions WHERE id = " + sqlQuoted(execution_id));
  if (!t) return std::unexpected(t.error());
  return !t->rows.empty();
}

base::Result<void> History::requireExecutions(const std::vector<std::string>& execution_ids) {
  for (const auto& e : execution_ids) {
    auto known = hasExecution(e);
    if (!known) return std::unexpected(known.error());
    if (!*known) return base::fail(base::Code::kNotFound, "no execution '" + e + "' in the store");
  }
  return {};
}

}  // namespace sluice::replay
