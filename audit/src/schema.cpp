// Schema creation, version checks and migrations; see schema.hpp and schemas/audit.sql.
#include "schema.hpp"

#include <fmt/format.h>

#include <array>
#include <string>
#include <string_view>

#include "schema_sql.hpp"
#include "sqlite_db.hpp"

namespace sluice::audit::detail {
namespace {

// kMigrations[v - 1] upgrades a version-v database to v + 1; it runs inside the open
// transaction and must end by setting PRAGMA user_version; version 0 (empty file) gets
// kSchemaSql. Keep each in step with schemas/audit.sql.
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
};

struct Header {
  std::int64_t application_id = 0;
  std::int64_t user_version = 0;
  std::int64_t objects = 0;  // rows of sqlite_master
};

std::expected<Header, Error> readHeader(const std::filesystem::path& path, sqlite3* db) {
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

Error foreign(const std::filesystem::path& path, const Header& h) {
  return Error{
      fmt::format("{}: not a sluice audit database (application_id {:#x}, user_version "
                  "{}, {} schema objects); refusing to modify it",
                  path.string(), h.application_id, h.user_version, h.objects)};
}

Error newer(const std::filesystem::path& path, const Header& h) {
  return Error{
      fmt::format("{}: audit schema version {} is newer than this sluice supports ({}); "
                  "upgrade sluice",
                  path.string(), h.user_version, kSchemaVersion)};
}

}  // namespace

std::expected<void, Error> initOrMigrate(const std::filesystem::path& path, sqlite3* db) {
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
    if (!r) return r;
  }
  return {};
}

std::expected<void, Error> checkReadable(const std::filesystem::path& path, sqlite3* db) {
  auto h = readHeader(path, db);
  if (!h) return std::unexpected(h.error());
  if (h->application_id != kApplicationId || h->user_version < 1)
    return std::unexpected(foreign(path, *h));
  if (h->user_version > kSchemaVersion) return std::unexpected(newer(path, *h));
  if (h->user_version < kSchemaVersion) {
    return std::unexpected(Error{fmt::format(
        "{}: audit schema version {} is older than {}; open it once with a writer (sluice run "
        "or sluice proxy --audit) to migrate it",
        path.string(), h->user_version, kSchemaVersion)});
  }
  return {};
}

std::expected<Db, Error> openReadSnapshot(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    return std::unexpected(Error{path.string() + ": no such file"});
  auto conn = openDb(path, SQLITE_OPEN_READONLY, 5000);
  if (!conn) return std::unexpected(conn.error());
  if (auto r = checkReadable(path, conn->get()); !r) return std::unexpected(r.error());
  if (auto r = exec(path, conn->get(), "BEGIN"); !r) return std::unexpected(r.error());
  return conn;
}

}  // namespace sluice::audit::detail
