// `sluice audit ship`: copies a node's chained rows and checkpoints into the central PostgreSQL
// store (schemas/audit.postgresql.sql), batch by batch, each batch and the node's new position
// in one PostgreSQL transaction (so a ship killed mid-batch loses and doubles nothing).
#include <fmt/format.h>
#include <sqlite3.h>

#include <algorithm>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "chain_rows.hpp"
#include "pg_conn.hpp"
#include "pg_schema_sql.hpp"
#include "rows.hpp"
#include "schema.hpp"
#include "schema_sql.hpp"
#include "sluice/audit/central.hpp"
#include "sluice/base/clock.hpp"
#include "sqlite_db.hpp"

namespace sluice::audit {
namespace {

using detail::PgResult;

/// The declared type of every chained column, from schemas/audit.sql itself (an in-memory
/// database created from it): table -> column -> "INTEGER" | "TEXT".
std::expected<std::map<std::string, std::map<std::string, std::string>>, base::Error>
sqliteColumnTypes() {
  const std::filesystem::path mem = ":memory:";
  auto db = detail::openDb(mem, SQLITE_OPEN_READWRITE | SQLITE_OPEN_MEMORY, 0);
  if (!db) return std::unexpected(db.error());
  if (auto r = detail::exec(mem, db->get(), std::string(detail::kSchemaSql)); !r)
    return std::unexpected(r.error());
  std::map<std::string, std::map<std::string, std::string>> types;
  for (const auto& t : detail::chainTables()) {
    auto s = detail::prepare(mem, db->get(), fmt::format("PRAGMA table_info({})", t.name));
    if (!s) return std::unexpected(s.error());
    while (s->step() == SQLITE_ROW)
      types[std::string(t.name)][std::string(s->columnText(1))] = s->columnText(2);
  }
  return types;
}

/// CREATE TABLE IF NOT EXISTS for each chained table, from its description (rows.hpp).
std::expected<std::string, base::Error> chainTablesDdl() {
  auto types = sqliteColumnTypes();
  if (!types) return std::unexpected(types.error());
  std::string ddl;
  for (const auto& t : detail::chainTables()) {
    std::string cols;
    for (std::string_view c : t.columns) {
      const std::string& type = (*types)[std::string(t.name)][std::string(c)];
      cols += fmt::format("  {} {},\n", c, type == "INTEGER" ? "BIGINT" : "TEXT");
    }
    ddl += fmt::format(
        "CREATE TABLE IF NOT EXISTS {} (\n  node TEXT NOT NULL,\n  seq BIGINT NOT NULL,\n"
        "  prev_hash TEXT NOT NULL,\n  hash TEXT NOT NULL,\n{}  PRIMARY KEY (node, seq)\n);\n",
        t.name, cols);
  }
  return ddl;
}

/// The central schema and the node's position row, created when missing. Serialised by an
/// advisory lock: concurrent CREATE TABLE IF NOT EXISTS can still collide in PostgreSQL.
std::expected<void, base::Error> ensureSchema(PGconn* c, const std::string& node) {
  auto ddl = chainTablesDdl();
  if (!ddl) return std::unexpected(ddl.error());
  const std::string now = std::to_string(base::nowMs());
  const std::string genesis(detail::kGenesisHash);
  for (const std::string& sql :
       {std::string("BEGIN"), std::string("SELECT pg_advisory_xact_lock(7385418)"),
        std::string(detail::kPgSchemaSql), *ddl}) {
    if (auto r = detail::pgExec(c, sql); !r) return std::unexpected(r.error());
  }
  if (auto r = detail::pgExec(c,
                              "INSERT INTO ship_positions (node, seq, hash, checkpoint_seq, "
                              "shipped_at) VALUES ($1, 0, $2, 0, $3) ON CONFLICT DO NOTHING",
                              {node.c_str(), genesis.c_str(), now.c_str()});
      !r)
    return std::unexpected(r.error());
  if (auto r = detail::pgExec(c, "COMMIT"); !r) return std::unexpected(r.error());
  return {};
}

/// The node's shipped position, read under a row lock (a second ship of the same node waits).
struct Position {
  std::int64_t seq = 0;
  std::string hash;
  std::int64_t checkpoint_seq = 0;
};

std::expected<Position, base::Error> lockPosition(PGconn* c, const std::string& node) {
  auto r = detail::pgExec(
      c, "SELECT seq, hash, checkpoint_seq FROM ship_positions WHERE node = $1 FOR UPDATE",
      {node.c_str()});
  if (!r) return std::unexpected(r.error());
  if (PQntuples(r->get()) != 1)
    return base::fail(base::Code::kIo, "postgresql: ship_positions has no row for " + node);
  return Position{std::stoll(PQgetvalue(r->get(), 0, 0)), PQgetvalue(r->get(), 0, 1),
                  std::stoll(PQgetvalue(r->get(), 0, 2))};
}

/// A row's place in the chain, to check the batch continues the shipped chain.
struct Link {
  std::int64_t seq;
  std::string prev_hash, hash;
};

/// Column `col` of the current row as a COPY text field.
void copyField(std::string& out, sqlite3_stmt* s, int col) {
  switch (sqlite3_column_type(s, col)) {
    case SQLITE_NULL:
      out += "\\N";
      break;
    case SQLITE_INTEGER:
      out += std::to_string(sqlite3_column_int64(s, col));
      break;
    default:
      detail::pgCopyEscape(
          out, std::string_view(reinterpret_cast<const char*>(sqlite3_column_text(s, col)),
                                static_cast<std::size_t>(sqlite3_column_bytes(s, col))));
  }
}

/// One read of the node's store: the chained rows in (from, to] and the checkpoints after
/// `checkpoint_seq` that those rows complete, as COPY data per table.
class BatchReader {
 public:
  BatchReader(const std::filesystem::path& path, sqlite3* db, const std::string& node)
      : path_(path), db_(db), node_(node) {}

  std::expected<void, base::Error> readRows(std::int64_t from, std::int64_t to) {
    for (const auto& t : detail::chainTables()) {
      auto s = detail::prepare(
          path_, db_,
          fmt::format("SELECT seq, prev_hash, hash, {} FROM {} WHERE seq > ?1 AND seq <= ?2",
                      detail::columnList(t, ""), t.name));
      if (!s) return std::unexpected(s.error());
      s->bindInt(1, from);
      s->bindInt(2, to);
      std::string& data = copy_[std::string(t.name)];
      const int ncols = static_cast<int>(t.columns.size()) + 3;
      int rc;
      while ((rc = s->step()) == SQLITE_ROW) {
        links_.push_back(
            {s->columnInt(0), std::string(s->columnText(1)), std::string(s->columnText(2))});
        detail::pgCopyEscape(data, node_);
        for (int col = 0; col < ncols; ++col) {
          data += '\t';
          copyField(data, s->get(), col);
        }
        data += '\n';
      }
      if (rc != SQLITE_DONE)
        return std::unexpected(
            detail::sqliteError(path_, db_, rc, "cannot read " + std::string(t.name)));
    }
    std::sort(links_.begin(), links_.end(), [](auto& a, auto& b) { return a.seq < b.seq; });
    return {};
  }

  std::expected<void, base::Error> readCheckpoints(std::int64_t after, std::int64_t position) {
    auto stmt = detail::prepare(path_, db_,
                                "SELECT seq, position, root, signature, key_id, ts, frontier "
                                "FROM checkpoints WHERE seq > ?1 AND position <= ?2 ORDER BY seq");
    if (!stmt) return std::unexpected(stmt.error());
    stmt->bindInt(1, after);
    stmt->bindInt(2, position);
    int rc;
    while ((rc = stmt->step()) == SQLITE_ROW) {
      last_checkpoint_ = stmt->columnInt(0);
      ++checkpoints_;
      detail::pgCopyEscape(checkpoint_copy_, node_);
      for (int col = 0; col < 7; ++col) {
        checkpoint_copy_ += '\t';
        copyField(checkpoint_copy_, stmt->get(), col);
      }
      checkpoint_copy_ += '\n';
    }
    if (rc != SQLITE_DONE)
      return std::unexpected(detail::sqliteError(path_, db_, rc, "cannot read checkpoints"));
    return {};
  }

  const std::filesystem::path& path_;
  sqlite3* db_;
  const std::string& node_;
  std::vector<Link> links_;
  std::map<std::string, std::string> copy_;  // table -> COPY data
  std::string checkpoint_copy_;
  std::int64_t last_checkpoint_ = 0;
  std::uint64_t checkpoints_ = 0;
};

/// The batch's rows must continue the shipped chain: seq from+1, from+2, ... each linked to the
/// one before. "" when they do.
std::string continuityError(const std::vector<Link>& links, const Position& pos) {
  std::int64_t seq = pos.seq;
  std::string_view prev = pos.hash;
  for (const Link& l : links) {
    if (l.seq != seq + 1)
      return fmt::format("the store's chain has a gap or a duplicate at seq {} (expected {})",
                         l.seq, seq + 1);
    if (l.prev_hash != prev)
      return fmt::format(
          "seq {} does not continue the chain shipped for this node (prev_hash differs): "
          "another store under the same --node, or a rewritten store",
          l.seq);
    seq = l.seq;
    prev = l.hash;
  }
  return {};
}

/// One batch in one PostgreSQL transaction: lock the position, read the store from it, COPY the
/// rows and checkpoints, advance the position. Returns the rows shipped (0: nothing new).
std::expected<std::size_t, base::Error> shipBatch(PGconn* c, const std::filesystem::path& path,
                                                  sqlite3* db, const ShipOptions& o,
                                                  ShipProgress& progress) {
  if (auto r = detail::pgExec(c, "BEGIN"); !r) return std::unexpected(r.error());
  auto pos = lockPosition(c, o.node);
  if (!pos) return std::unexpected(pos.error());
  BatchReader batch(path, db, o.node);
  const auto to = pos->seq + static_cast<std::int64_t>(o.batch_rows);
  if (auto r = batch.readRows(pos->seq, to); !r) return std::unexpected(r.error());
  if (std::string why = continuityError(batch.links_, *pos); !why.empty())
    return base::fail(base::Code::kInvalidArgument, path.string() + ": " + why);
  const std::int64_t new_seq = batch.links_.empty() ? pos->seq : batch.links_.back().seq;
  if (auto r = batch.readCheckpoints(pos->checkpoint_seq, new_seq); !r)
    return std::unexpected(r.error());
  if (batch.links_.empty() && batch.checkpoints_ == 0) {
    if (auto r = detail::pgExec(c, "ROLLBACK"); !r) return std::unexpected(r.error());
    return 0;
  }
  const auto cols = [](const detail::ChainTable& t) {
    return fmt::format("{} (node, seq, prev_hash, hash, {})", t.name, detail::columnList(t, ""));
  };
  for (const auto& t : detail::chainTables()) {
    const std::string& data = batch.copy_[std::string(t.name)];
    if (data.empty()) continue;
    if (auto r = detail::pgCopy(c, cols(t), data); !r) return std::unexpected(r.error());
  }
  if (!batch.checkpoint_copy_.empty()) {
    if (auto r = detail::pgCopy(c, "checkpoints", batch.checkpoint_copy_); !r)
      return std::unexpected(r.error());
  }
  const std::string seq = std::to_string(new_seq);
  const std::string hash = batch.links_.empty() ? pos->hash : batch.links_.back().hash;
  const std::string ckpt =
      std::to_string(batch.checkpoints_ ? batch.last_checkpoint_ : pos->checkpoint_seq);
  const std::string now = std::to_string(base::nowMs());
  if (auto r =
          detail::pgExec(c,
                         "UPDATE ship_positions SET seq = $2, hash = $3, checkpoint_seq = "
                         "$4, shipped_at = $5 WHERE node = $1",
                         {o.node.c_str(), seq.c_str(), hash.c_str(), ckpt.c_str(), now.c_str()});
      !r)
    return std::unexpected(r.error());
  if (auto r = detail::pgExec(c, "COMMIT"); !r) return std::unexpected(r.error());
  progress.seq = new_seq;
  progress.rows += batch.links_.size();
  progress.checkpoints += batch.checkpoints_;
  return batch.links_.size() + batch.checkpoints_;
}

/// A fresh read snapshot of the store for the next batch.
std::expected<void, base::Error> renewSnapshot(const std::filesystem::path& path, sqlite3* db) {
  if (auto r = detail::exec(path, db, "COMMIT"); !r) return r;
  return detail::exec(path, db, "BEGIN");
}

}  // namespace

std::expected<ShipProgress, base::Error> ship(const ShipOptions& o) {
  if (o.node.empty())
    return base::fail(base::Code::kInvalidArgument, "ship: a node id is required (--node)");
  auto pg = detail::pgConnect(o.conninfo);
  if (!pg) return std::unexpected(pg.error());
  if (auto r = ensureSchema(pg->get(), o.node); !r) return std::unexpected(r.error());
  auto store = detail::openReadSnapshot(o.db);
  if (!store) return std::unexpected(store.error());
  ShipProgress progress;
  for (;;) {
    auto shipped = shipBatch(pg->get(), o.db, store->get(), o, progress);
    if (!shipped) {
      // The failed transaction is rolled back; nothing of the batch was kept.
      (void)detail::pgExec(pg->get(), "ROLLBACK");
      return std::unexpected(shipped.error());
    }
    if (*shipped > 0 && o.on_batch) o.on_batch(progress);
    if (auto r = renewSnapshot(o.db, store->get()); !r) return std::unexpected(r.error());
    if (*shipped > 0) continue;
    if (o.once || (o.stop && o.stop())) return progress;
    if (o.wait) {
      if (o.wait(o.interval)) return progress;
    } else {
      std::this_thread::sleep_for(o.interval);
    }
  }
}

}  // namespace sluice::audit
