// Schema creation, version checks and migrations; see schema.hpp and schemas/audit.sql.
#include "schema.hpp"

#include <fmt/format.h>

#include <array>
#include <string>
#include <string_view>

#include "row_hash.hpp"
#include "rows.hpp"
#include "schema_sql.hpp"
#include "sqlite_db.hpp"

namespace sluice::audit::detail {
namespace {

// kMigrations[v - 1] upgrades a version-v database to v + 1; it runs inside the open
// transaction and must end by setting PRAGMA user_version (5 -> 6: chainVersion5Policies()
// does); version 0 (empty file) gets kSchemaSql. Keep each in step with schemas/audit.sql.
constexpr std::array<std::string_view, kSchemaVersion - 1> kMigrations = {
    // 1 -> 2: the forwards table (write-ahead rows of requests sent upstream).
    R"sql(
CREATE TABLE forwards (
  seq               INTEGER PRIMARY KEY,
  connection_id     TEXT,
  execution_id      TEXT,
  workflow          TEXT NOT NULL,
  ts                INTEGER NOT NULL,
  method            TEXT,
  host              TEXT,
  path              TEXT,
  rule_id           TEXT,
  attempt           INTEGER NOT NULL,
  injected_secrets  TEXT NOT NULL,
  prev_hash         TEXT NOT NULL,
  hash              TEXT NOT NULL
) STRICT;
CREATE INDEX forwards_execution ON forwards (execution_id);
PRAGMA user_version = 2;
)sql",
    // 2 -> 3: executions.caller and executions.session_id (`sluice serve`), generated from the
    // receipt, which the row's hash already covers.
    R"sql(
ALTER TABLE executions ADD COLUMN caller TEXT
  GENERATED ALWAYS AS (json_extract(receipt, '$.caller')) VIRTUAL;
ALTER TABLE executions ADD COLUMN session_id TEXT
  GENERATED ALWAYS AS (json_extract(receipt, '$.session_id')) VIRTUAL;
CREATE INDEX executions_caller ON executions (caller);
PRAGMA user_version = 3;
)sql",
    // 3 -> 4: dns_queries (sluice's DNS for the sandbox), in the same hash chain.
    R"sql(
-- One row per DNS query sluice's DNS answered for a sandbox (version 4). name is the question's
-- name (lower-case; bytes outside [a-z0-9._-] as \DDD), qtype "A", "AAAA", "TXT", ... or
-- "TYPE<n>", answer the synthetic address or the response code (NXDOMAIN, NODATA, REFUSED,
-- FORMERR, NOTIMP, SERVFAIL). Nothing is ever forwarded to a real resolver.
CREATE TABLE dns_queries (
  seq           INTEGER PRIMARY KEY,
  execution_id  TEXT,
  workflow      TEXT NOT NULL,
  ts            INTEGER NOT NULL,
  name          TEXT,
  qtype         TEXT,
  answer        TEXT,
  decision      TEXT NOT NULL,  -- allow | deny
  rule_id       TEXT,
  reason        TEXT,
  prev_hash     TEXT NOT NULL,
  hash          TEXT NOT NULL
) STRICT;
CREATE INDEX dns_queries_execution ON dns_queries (execution_id);
PRAGMA user_version = 4;
)sql",
    // 4 -> 5: approvals (issue 14) in the same hash chain, and signed checkpoints (issue 15).
    R"sql(
-- One row per decided approval of an `ask` rule (version 5), in the same hash chain: answered
-- by an approver, timed out, or refused because its execution ended. method and path are NULL
-- for a tunnel (CONNECT); reason is NULL when allowed.
CREATE TABLE approvals (
  seq           INTEGER PRIMARY KEY,
  id            TEXT NOT NULL,     -- "ap-...", as approvers saw it
  execution_id  TEXT,              -- NULL for a standalone proxy
  session_id    TEXT,
  workflow      TEXT NOT NULL,
  caller        TEXT,              -- who the execution belongs to ("uid:N", a token name)
  rule_id       TEXT,              -- the ask rule
  host          TEXT NOT NULL,
  port          INTEGER NOT NULL,
  method        TEXT,
  path          TEXT,
  decision      TEXT NOT NULL,     -- allow | deny
  reason        TEXT,              -- approval_denied | approval_timeout | execution_ended | ...
  scope         TEXT,              -- once | execution
  decided_by    TEXT,              -- "uid:N", a token name, approve-with, mcp, timeout, ...
  asked_at      INTEGER NOT NULL,
  decided_at    INTEGER NOT NULL,
  prev_hash     TEXT NOT NULL,
  hash          TEXT NOT NULL
) STRICT;
CREATE INDEX approvals_execution ON approvals (execution_id);

-- Signed checkpoints (version 5; docs/audit.md "Signed checkpoints"). Not in the hash chain:
-- each row is authenticated by its Ed25519 signature over the text
-- "sluice-checkpoint v1\n<position>\n<root>\n<ts>\n". root is the RFC 9162 Merkle tree hash
-- over the chain hashes of seq 1..position (leaf = SHA-256(0x00 || 32-byte row hash)).
-- frontier is the writer's cache of the tree's right edge (hex subtree roots, largest first),
-- so a new writer resumes the tree without re-reading every row; nothing trusts it unverified.
CREATE TABLE checkpoints (
  seq        INTEGER PRIMARY KEY,  -- checkpoint number (its own sequence, not the chain's)
  position   INTEGER NOT NULL,     -- last chained seq covered (= the tree's size)
  root       TEXT NOT NULL,        -- lowercase hex Merkle root
  signature  TEXT NOT NULL,        -- base64 Ed25519 signature of the signed text
  key_id     TEXT NOT NULL,        -- lowercase hex SHA-256 of the raw 32-byte public key
  ts         INTEGER NOT NULL,     -- when it was signed (epoch ms; signed)
  frontier   TEXT NOT NULL
) STRICT;
CREATE INDEX checkpoints_position ON checkpoints (position);
PRAGMA user_version = 5;
)sql",
    // 5 -> 6 (issue 21): policies become rows of the hash chain (chainVersion5Policies() moves
    // the old rows into it and sets the version), and checkpoints are numbered 1, 2, ... in
    // position order (the identity unless two signing writers raced).
    R"sql(
ALTER TABLE policies RENAME TO policies_v5;
-- Every policy text that decided anything, stored once by the SHA-256 of its bytes. Version 6
-- makes each a row of the hash chain (so workflow and loaded_at are covered too).
CREATE TABLE policies (
  seq        INTEGER PRIMARY KEY,    -- global chain position
  sha256     TEXT NOT NULL UNIQUE,   -- lowercase hex SHA-256 of yaml
  workflow   TEXT NOT NULL,
  yaml       TEXT NOT NULL,
  loaded_at  INTEGER NOT NULL,       -- when this store first saw it
  prev_hash  TEXT NOT NULL,
  hash       TEXT NOT NULL
) STRICT;
-- Renumbered in place (a rebuilt table's stored SQL would differ from a new database's).
CREATE TEMP TABLE checkpoints_order AS
  SELECT seq AS old, row_number() OVER (ORDER BY position, seq) AS new FROM checkpoints;
UPDATE checkpoints SET seq = -seq;
UPDATE checkpoints SET seq = (SELECT new FROM checkpoints_order WHERE old = -checkpoints.seq);
DROP TABLE checkpoints_order;
)sql",
    // 6 -> 7: the policy that decided each row (policy_generation) and a shadow policy's
    // decision; an optional tail of each table (rows.hpp), so no row is re-hashed.
    R"sql(
ALTER TABLE connections ADD COLUMN policy_generation INTEGER;
ALTER TABLE connections ADD COLUMN shadow_decision TEXT;
ALTER TABLE connections ADD COLUMN shadow_rule TEXT;
ALTER TABLE requests ADD COLUMN policy_generation INTEGER;
ALTER TABLE requests ADD COLUMN shadow_decision TEXT;
ALTER TABLE requests ADD COLUMN shadow_rule TEXT;
ALTER TABLE dns_queries ADD COLUMN policy_generation INTEGER;
ALTER TABLE dns_queries ADD COLUMN shadow_decision TEXT;
ALTER TABLE dns_queries ADD COLUMN shadow_rule TEXT;
PRAGMA user_version = 7;
)sql",
    // 7 -> 8: no index on requests (connection_id); see schemas/audit.sql.
    R"sql(
DROP INDEX requests_connection;
PRAGMA user_version = 8;
)sql",
    // 8 -> 9: executions_caller holds only the rows that have a caller; see schemas/audit.sql.
    R"sql(
DROP INDEX executions_caller;
CREATE INDEX executions_caller ON executions (caller) WHERE caller IS NOT NULL;
PRAGMA user_version = 9;
)sql",
    // 9 -> 10: the execution_id indexes hold only the rows of an execution; see
    // schemas/audit.sql.
    R"sql(
DROP INDEX connections_execution;
CREATE INDEX connections_execution ON connections (execution_id) WHERE execution_id IS NOT NULL;
DROP INDEX requests_execution;
CREATE INDEX requests_execution ON requests (execution_id) WHERE execution_id IS NOT NULL;
DROP INDEX forwards_execution;
CREATE INDEX forwards_execution ON forwards (execution_id) WHERE execution_id IS NOT NULL;
DROP INDEX dns_queries_execution;
CREATE INDEX dns_queries_execution ON dns_queries (execution_id) WHERE execution_id IS NOT NULL;
DROP INDEX approvals_execution;
CREATE INDEX approvals_execution ON approvals (execution_id) WHERE execution_id IS NOT NULL;
PRAGMA user_version = 10;
)sql",
};

/// The end of migration 5 -> 6: appends each version-5 policy row (not chained then) to the
/// chain, in the order the store first saw them, keeping its loaded_at; the chain head moves
/// on. Rows and checkpoints already there keep their hashes: the chain simply goes on.
std::expected<void, base::Error> chainVersion5Policies(const std::filesystem::path& path,
                                                       sqlite3* db) {
  auto head = prepare(path, db, "SELECT seq, hash FROM chain_head WHERE id = 0");
  if (!head) return std::unexpected(head.error());
  if (head->step() != SQLITE_ROW)
    return std::unexpected(
        base::Error{base::Code::kIntegrity, path.string() + ": chain_head row is missing"});
  std::int64_t seq = head->columnInt(0);
  std::string prev(head->columnText(1));
  auto old = prepare(path, db,
                     "SELECT sha256, workflow, yaml, loaded_at FROM policies_v5 "
                     "ORDER BY loaded_at, sha256");
  if (!old) return std::unexpected(old.error());
  const auto& policies = rowOf<PolicyRecord>();
  auto insert = prepare(path, db, insertSql(policies.table));
  if (!insert) return std::unexpected(insert.error());
  RowHasher hasher;
  RowScratch scratch;
  std::array<Value, kMaxColumns> buffer;
  int rc;
  while ((rc = old->step()) == SQLITE_ROW) {
    const PolicyRecord policy{std::string(old->columnText(0)), std::string(old->columnText(1)),
                              std::string(old->columnText(2)), old->columnInt(3)};
    const auto values = rowValues(policies, policy, scratch, buffer);
    std::string hash =
        hasher.hash(policies.table.name, seq + 1, prev, hashedValues(policies.table, values));
    bindRow(*insert, seq + 1, prev, hash, values);
    int step_rc = insert->step();
    insert->reset();
    if (step_rc != SQLITE_DONE)
      return std::unexpected(sqliteError(path, db, step_rc, "cannot chain the version-5 policies"));
    ++seq;
    prev = std::move(hash);
  }
  if (rc != SQLITE_DONE)
    return std::unexpected(sqliteError(path, db, rc, "cannot read the version-5 policies"));
  old = Stmt();
  head = Stmt();
  auto update = prepare(path, db, "UPDATE chain_head SET seq = ?1, hash = ?2 WHERE id = 0");
  if (!update) return std::unexpected(update.error());
  update->bindInt(1, seq);
  update->bindText(2, prev);
  if (rc = update->step(); rc != SQLITE_DONE)
    return std::unexpected(sqliteError(path, db, rc, "cannot update the chain head"));
  update = Stmt();
  return exec(path, db, "DROP TABLE policies_v5; PRAGMA user_version = 6;");
}

struct Header {
  std::int64_t application_id = 0;
  std::int64_t user_version = 0;
  std::int64_t objects = 0;  // rows of sqlite_master
};

std::expected<Header, base::Error> readHeader(const std::filesystem::path& path, sqlite3* db) {
  Header h;
  // The first statement that reads the file is where a corrupt or non-SQLite file shows up
  // (SQLITE_NOTADB "file is not a database").
  auto objects = queryInt(path, db, "SELECT count(*) FROM sqlite_master");
  if (!objects) return std::unexpected(objects.error());
  auto app = queryInt(path, db, "PRAGMA application_id");
  if (!app) return std::unexpected(app.error());
  auto ver = queryInt(path, db, "PRAGMA user_version");
  if (!ver) return std::unexpected(ver.error());
  h.application_id = *app;
  h.user_version = *ver;
  h.objects = *objects;
  return h;
}

base::Error foreign(const std::filesystem::path& path, const Header& h) {
  return base::Error{
      base::Code::kInvalidArgument,
      fmt::format("{}: not a sluice audit database (application_id {:#x}, user_version "
                  "{}, {} schema objects); refusing to modify it",
                  path.string(), h.application_id, h.user_version, h.objects)};
}

base::Error newer(const std::filesystem::path& path, const Header& h) {
  return base::Error{
      base::Code::kConflict,
      fmt::format("{}: audit schema version {} is newer than this sluice supports ({}); "
                  "upgrade sluice",
                  path.string(), h.user_version, kSchemaVersion)};
}

}  // namespace

std::expected<void, base::Error> initOrMigrate(const std::filesystem::path& path, sqlite3* db) {
  auto h = readHeader(path, db);
  if (!h) return std::unexpected(h.error());
  if (h->application_id == 0 && h->user_version == 0 && h->objects == 0) {
    return exec(path, db, std::string(kSchemaSql));
  }
  if (h->application_id != kApplicationId || h->user_version < 1)
    return std::unexpected(foreign(path, *h));
  if (h->user_version > kSchemaVersion) return std::unexpected(newer(path, *h));
  for (auto v = h->user_version; v < kSchemaVersion; ++v) {
    auto r = exec(path, db, std::string(kMigrations[static_cast<std::size_t>(v - 1)]));
    if (r && v == 5) r = chainVersion5Policies(path, db);
    if (!r) return r;
  }
  return {};
}

std::expected<void, base::Error> checkReadable(const std::filesystem::path& path, sqlite3* db) {
  auto h = readHeader(path, db);
  if (!h) return std::unexpected(h.error());
  if (h->application_id != kApplicationId || h->user_version < 1)
    return std::unexpected(foreign(path, *h));
  if (h->user_version > kSchemaVersion) return std::unexpected(newer(path, *h));
  if (h->user_version < kSchemaVersion) {
    return std::unexpected(base::Error{
        base::Code::kConflict,
        fmt::format(
            "{}: audit schema version {} is older than {}; open it once with a writer (sluice run "
            "or sluice proxy --audit) to migrate it",
            path.string(), h->user_version, kSchemaVersion)});
  }
  return {};
}

std::expected<Db, base::Error> openReadSnapshot(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    return std::unexpected(base::Error{base::Code::kNotFound, path.string() + ": no such file"});
  auto conn = openDb(path, SQLITE_OPEN_READONLY, 5000);
  if (!conn) return std::unexpected(conn.error());
  if (auto r = checkReadable(path, conn->get()); !r) return std::unexpected(r.error());
  if (auto r = exec(path, conn->get(), "BEGIN"); !r) return std::unexpected(r.error());
  return conn;
}

}  // namespace sluice::audit::detail
