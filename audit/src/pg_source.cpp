// `sluice audit verify --db 'postgresql://...?node=N'`: the node's chain in the central store as
// a ChainSource (chain_source.hpp), so the walk and its checks are verify's own.
#include <fmt/format.h>

#include <charconv>
#include <limits>
#include <vector>

#include "chain_rows.hpp"
#include "chain_source.hpp"
#include "pg_conn.hpp"
#include "sluice/audit/central.hpp"

namespace sluice::audit {
namespace {

using detail::PgResult;
using detail::Value;

constexpr Oid kInt8Oid = 20;  // PostgreSQL's BIGINT

std::int64_t toInt(const PGresult* r, int row, int col) {
  const char* v = PQgetvalue(r, row, col);
  std::int64_t out = 0;
  std::from_chars(v, v + PQgetlength(r, row, col), out);
  return out;
}

std::string_view text(const PGresult* r, int row, int col) {
  return {PQgetvalue(r, row, col), static_cast<std::size_t>(PQgetlength(r, row, col))};
}

/// One table's rows for the node in seq order, fetched through a server-side cursor.
struct PgCursor {
  const detail::ChainTable* table = nullptr;
  std::string name;  // the cursor's
  PgResult page;
  int row = 0;
  bool has_row = false;
  std::int64_t seq = 0;

  std::expected<void, base::Error> next(PGconn* c) {
    ++row;
    if (!page || row >= PQntuples(page.get())) {
      auto r = detail::pgExec(c, "FETCH 1000 FROM " + name);
      if (!r) return std::unexpected(r.error());
      page = std::move(*r);
      row = 0;
    }
    has_row = row < PQntuples(page.get());
    if (has_row) seq = toInt(page.get(), row, 0);
    return {};
  }

  /// Column i of the hashed columns: NULL, a BIGINT as an integer, anything else as text.
  Value value(std::size_t i) const {
    const int col = static_cast<int>(i + 3);
    if (PQgetisnull(page.get(), row, col)) return Value{};
    if (PQftype(page.get(), col) == kInt8Oid) return Value{toInt(page.get(), row, col)};
    return Value{text(page.get(), row, col)};
  }
};

class PgChainSource final : public detail::ChainSource {
 public:
  /// Rows after seq `after` and checkpoints past that position (verify: all of them).
  explicit PgChainSource(const CentralTarget& target,
                         std::int64_t after = std::numeric_limits<std::int64_t>::min())
      : target_(target), after_(after) {}

  std::expected<void, base::Error> open() {
    auto c = detail::pgConnect(target_.conninfo);
    if (!c) return std::unexpected(c.error());
    conn_ = std::move(*c);
    // One snapshot for the whole walk while ships keep appending.
    if (auto r = detail::pgExec(conn_.get(), "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"); !r)
      return std::unexpected(r.error());
    char* lit = PQescapeLiteral(conn_.get(), target_.node.c_str(), target_.node.size());
    if (!lit) return std::unexpected(detail::pgError(conn_.get(), "node id"));
    node_literal_ = lit;
    PQfreemem(lit);
    for (const auto& t : detail::chainTables()) {
      PgCursor cur;
      cur.table = &t;
      cur.name = fmt::format("sluice_verify_{}", t.name);
      cur.row = -1;
      const std::string sql = fmt::format(
          "DECLARE {} NO SCROLL CURSOR FOR SELECT seq, prev_hash, hash, {} FROM {} "
          "WHERE node = {} AND seq > {} ORDER BY seq",
          cur.name, detail::columnList(t, ""), t.name, node_literal_, after_);
      if (auto r = detail::pgExec(conn_.get(), sql); !r) return std::unexpected(r.error());
      if (auto r = cur.next(conn_.get()); !r) return r;
      cursors_.push_back(std::move(cur));
    }
    auto ck = detail::pgExec(conn_.get(), fmt::format("SELECT seq, position, root, signature, "
                                                      "key_id, ts, frontier FROM checkpoints "
                                                      "WHERE node = {} AND position > {} "
                                                      "ORDER BY position, seq",
                                                      node_literal_, after_));
    if (!ck) return std::unexpected(ck.error());
    checkpoints_ = std::move(*ck);
    return {};
  }

  std::expected<bool, base::Error> nextRow(detail::ChainRow& row) override {
    if (last_) {
      if (auto r = last_->next(conn_.get()); !r) return std::unexpected(r.error());
    }
    last_ = nullptr;
    for (auto& c : cursors_) {
      if (c.has_row && (!last_ || c.seq < last_->seq)) last_ = &c;
    }
    if (!last_) return false;
    const PgCursor& cur = *last_;
    values_.clear();
    std::string_view key;
    for (std::size_t i = 0; i < cur.table->columns.size(); ++i) {
      values_.push_back(cur.value(i));
      if (cur.table->columns[i] == cur.table->key_column &&
          !PQgetisnull(cur.page.get(), cur.row, static_cast<int>(i + 3)))
        key = text(cur.page.get(), cur.row, static_cast<int>(i + 3));
    }
    row = {cur.table,
           cur.seq,
           text(cur.page.get(), cur.row, 1),
           text(cur.page.get(), cur.row, 2),
           values_,
           key,
           true};
    return true;
  }

  std::expected<bool, base::Error> nextCheckpoint(detail::CheckpointRow& c) override {
    const PGresult* r = checkpoints_.get();
    if (next_checkpoint_ >= PQntuples(r)) return false;
    const int i = next_checkpoint_++;
    c = {toInt(r, i, 0), toInt(r, i, 1), text(r, i, 2), text(r, i, 3),
         text(r, i, 4),  toInt(r, i, 5), text(r, i, 6)};
    return true;
  }

  std::expected<std::optional<detail::ChainHead>, base::Error> head() override {
    auto r = detail::pgExec(conn_.get(), "SELECT seq, hash FROM ship_positions WHERE node = $1",
                            {target_.node.c_str()});
    if (!r) return std::unexpected(r.error());
    if (PQntuples(r->get()) != 1) return std::nullopt;
    return detail::ChainHead{toInt(r->get(), 0, 0), std::string(text(r->get(), 0, 1))};
  }

  std::string_view headName() const override { return "ship_positions"; }

  /// The first seq (in chain order) whose row's time is >= `since_ms`; nullopt when none.
  std::expected<std::optional<std::int64_t>, base::Error> firstSeqSince(std::int64_t since_ms) {
    std::string sql;
    for (const auto& t : detail::chainTables()) {
      sql += fmt::format("{}SELECT min(seq) AS s FROM {} WHERE node = $1 AND {} >= $2",
                         sql.empty() ? "" : " UNION ALL ", t.name, t.time_column);
    }
    const std::string since = std::to_string(since_ms);
    auto r = detail::pgExec(conn_.get(), "SELECT min(s) FROM (" + sql + ") m",
                            {target_.node.c_str(), since.c_str()});
    if (!r) return std::unexpected(r.error());
    if (PQntuples(r->get()) != 1 || PQgetisnull(r->get(), 0, 0)) return std::nullopt;
    return toInt(r->get(), 0, 0);
  }

  /// The seq of the node's execution `id`; nullopt when it has none.
  std::expected<std::optional<std::int64_t>, base::Error> executionSeq(std::string_view id) {
    const std::string key(id);
    auto r = detail::pgExec(conn_.get(), "SELECT seq FROM executions WHERE node = $1 AND id = $2",
                            {target_.node.c_str(), key.c_str()});
    if (!r) return std::unexpected(r.error());
    if (PQntuples(r->get()) != 1) return std::nullopt;
    return toInt(r->get(), 0, 0);
  }

 private:
  const CentralTarget& target_;
  const std::int64_t after_;
  detail::PgConn conn_;
  std::string node_literal_;
  std::vector<PgCursor> cursors_;
  PgCursor* last_ = nullptr;  // the cursor of the row last handed out
  PgResult checkpoints_;
  int next_checkpoint_ = 0;
  std::vector<Value> values_;
};

}  // namespace

bool isPostgresUri(std::string_view db) {
  return db.starts_with("postgresql://") || db.starts_with("postgres://");
}

std::expected<CentralTarget, base::Error> parseCentralUri(std::string_view uri,
                                                          bool node_required) {
  const auto q = uri.find('?');
  CentralTarget out;
  out.conninfo = std::string(uri.substr(0, q));
  std::string rest;  // the other parameters, passed on to libpq
  std::string_view params = q == std::string_view::npos ? "" : uri.substr(q + 1);
  while (!params.empty()) {
    const auto amp = params.find('&');
    const std::string_view p = params.substr(0, amp);
    params = amp == std::string_view::npos ? "" : params.substr(amp + 1);
    if (p.starts_with("node=")) {
      out.node = std::string(p.substr(5));
    } else if (!p.empty()) {
      rest += (rest.empty() ? "?" : "&") + std::string(p);
    }
  }
  out.conninfo += rest;
  if (out.node.empty() && node_required)
    return base::fail(base::Code::kInvalidArgument,
                      "a postgresql:// audit database needs ?node=ID (whose rows to read)");
  return out;
}

namespace {

/// The node's latest checkpoint as JSON (nullopt: none), read to the end of `source`'s list.
std::expected<std::optional<nlohmann::ordered_json>, base::Error> latestCheckpoint(
    detail::ChainSource& source) {
  std::optional<nlohmann::ordered_json> latest;
  detail::CheckpointRow c;
  for (;;) {
    auto more = source.nextCheckpoint(c);
    if (!more) return std::unexpected(more.error());
    if (!*more) return latest;
    latest = detail::checkpointJson(c);
  }
}

/// The row at `seq` and the audit path of leaf seq - 1 over rows 1..position, from one pass
/// over the node's chain (checking it is unbroken), as JSON text.
std::expected<std::string, base::Error> provePath(detail::ChainSource& source,
                                                  const std::string& node, std::int64_t seq,
                                                  const nlohmann::ordered_json& checkpoint) {
  const auto position = checkpoint["position"].get<std::int64_t>();
  detail::InclusionPathBuilder tree(static_cast<std::uint64_t>(seq - 1),
                                    static_cast<std::uint64_t>(position));
  const detail::ChainTable* table = nullptr;
  std::string prev, hash;
  nlohmann::ordered_json columns;
  detail::ChainRow row;
  std::int64_t rows = 0;
  while (rows < position) {
    auto more = source.nextRow(row);
    if (!more) return std::unexpected(more.error());
    if (!*more) break;
    const auto d = detail::fromHex(row.hash);
    if (row.seq != rows + 1 || !d)
      return base::fail(base::Code::kIntegrity,
                        fmt::format("{}: the chain is broken at seq {}; run sluice audit verify",
                                    node, rows + 1));
    tree.append(detail::leafHash(*d));
    if (row.seq == seq) {
      table = row.table;
      prev = row.prev_hash;
      hash = row.hash;
      columns = detail::valuesJson(*row.table, row.values);
    }
    ++rows;
  }
  if (rows != position || !table)
    return base::fail(base::Code::kIntegrity,
                      fmt::format("{}: the chain ends at seq {} but the checkpoint covers {}; run "
                                  "sluice audit verify",
                                  node, rows, position));
  if (detail::toHex(tree.root()) != checkpoint["root"].get<std::string>())
    return base::fail(base::Code::kIntegrity,
                      fmt::format("{}: rows 1..{} do not match checkpoint seq {}'s root; run "
                                  "sluice audit verify --pubkey",
                                  node, position, checkpoint["seq"].get<std::int64_t>()));
  return detail::proofJson(*table, seq, prev, hash, std::move(columns), position, tree.path(),
                           checkpoint);
}

}  // namespace

std::expected<std::string, base::Error> proveCentral(const CentralTarget& target,
                                                     std::string_view execution_id) {
  PgChainSource source(target);
  if (auto r = source.open(); !r) return std::unexpected(r.error());
  const std::string node = "postgresql node " + target.node;
  auto seq = source.executionSeq(execution_id);
  if (!seq) return std::unexpected(seq.error());
  if (!*seq)
    return base::fail(base::Code::kNotFound,
                      fmt::format("{}: no execution with id '{}'", node, execution_id));
  auto checkpoint = latestCheckpoint(source);
  if (!checkpoint) return std::unexpected(checkpoint.error());
  if (!*checkpoint || (**checkpoint)["position"].get<std::int64_t>() < **seq)
    return base::fail(base::Code::kNotFound,
                      fmt::format("{}: execution {} (seq {}) is not covered by a shipped signed "
                                  "checkpoint yet",
                                  node, execution_id, **seq));
  return provePath(source, node, **seq, **checkpoint);
}

std::expected<ExportStats, base::Error> exportCentral(const CentralTarget& target,
                                                      const ExportOptions& options,
                                                      std::ostream& out) {
  std::int64_t after = std::max<std::int64_t>(options.after_seq, 0);
  if (options.since_ms) {
    // The first row that recent, in a snapshot of its own: it only picks where to start.
    PgChainSource probe(target);
    if (auto r = probe.open(); !r) return std::unexpected(r.error());
    auto first = probe.firstSeqSince(*options.since_ms);
    if (!first) return std::unexpected(first.error());
    if (!*first) return ExportStats{0, 0, after};  // nothing that recent
    after = std::max(after, **first - 1);
  }
  PgChainSource source(target, after);
  if (auto r = source.open(); !r) return std::unexpected(r.error());
  return detail::exportSource(source, options.format, after, out);
}

std::expected<VerifyResult, base::Error> verifyCentral(const CentralTarget& target,
                                                       const VerifyOptions& options) {
  PgChainSource source(target);
  if (auto r = source.open(); !r) return std::unexpected(r.error());
  return detail::verifyChain(source, options);
}

}  // namespace sluice::audit
