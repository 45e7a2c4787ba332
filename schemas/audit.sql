-- sluice audit store, schema version 10 (PRAGMA user_version = 10).
-- Reference: docs/audit.md. This file is compiled into the sluice binary and executed, in one
-- transaction, on a new (empty) database. Times are Unix epoch milliseconds (UTC).
--
-- Every row of policies, executions, connections, requests, forwards, dns_queries and approvals
-- carries `seq`, a sequence number global to the database (one chain across the seven tables, in
-- insertion order), `prev_hash` (the hash of the row with seq - 1, or 64 zeros for seq 1) and
-- `hash` = SHA-256 over the canonical encoding of the row (docs/audit.md, "Hash chain").
-- chain_head holds the last seq and hash so that rows deleted from the end of the chain are
-- detected too. Every stored column is covered by a row hash or a checkpoint signature, or
-- re-derived and checked by `audit verify` (docs/audit.md, "What covers each column").
--
-- Version 7 appends to connections, requests and dns_queries the policy that decided each row:
-- policy_generation (1 for the policy a listener or session started with, one more per live
-- update or reload), and under a shadow policy its shadow_decision (allow | deny | ask) and
-- shadow_rule. All three are NULL on older rows; a row's hash covers them only when one is set
-- (docs/audit.md, "Hash chain"), so older rows keep their hashes.
--
-- Version 8 drops the index requests (connection_id): every commit rewrote one of its leaves
-- per open connection (about 70% of the WAL bytes of a proxied request). Requests of one
-- connection are found through requests_execution (docs/audit.md, "Indexes").
--
-- Version 9 makes executions_caller a partial index (WHERE caller IS NOT NULL): the receipts of
-- `sluice run` have no caller, and each one's commit wrote a leaf of that index for a NULL no
-- query looks up (one WAL page of the five to eight a receipt writes). A lookup by caller
-- (caller = ?) uses it as before.
--
-- Version 10 makes the five execution_id indexes partial (WHERE execution_id IS NOT NULL): the
-- rows of a standalone `sluice proxy` have no execution, and each one's insert added a NULL
-- entry no query looks up (about a quarter of the audit writer's CPU per proxied request). The
-- rows of an execution are found as before (execution_id = ?, IN (...), a join on it); a query
-- must say execution_id = ... (not IS) for SQLite to use the index.

PRAGMA application_id = 1397506885;  -- 0x534C4345, "SLCE": marks a sluice audit database
PRAGMA user_version = 10;

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

-- One row per finished execution (`sluice run`), committed durably before the run returns.
-- Version 3 adds caller (`sluice serve`: "uid:N" or a token name) and session_id, generated
-- from the receipt (so covered by the row's hash; NULL for `sluice run`).
CREATE TABLE executions (
  seq               INTEGER PRIMARY KEY,   -- global chain position
  id                TEXT NOT NULL UNIQUE,  -- execution id (receipt execution_id)
  workflow          TEXT NOT NULL,
  policy_sha256     TEXT,                  -- -> policies.sha256
  argv              TEXT,                  -- JSON array of strings
  started_at        INTEGER NOT NULL,
  ended_at          INTEGER NOT NULL,
  exit_code         INTEGER NOT NULL,
  signal            INTEGER NOT NULL,      -- 0 = none
  limit_hit         TEXT,                  -- NULL | timeout | cpu | memory | pids | output | disk | file_size
  usage             TEXT,                  -- JSON object {cpu_user_ms, cpu_sys_ms, max_rss_bytes, pids_peak}
  stdout_bytes      INTEGER NOT NULL,
  stderr_bytes      INTEGER NOT NULL,
  stdout_truncated  INTEGER NOT NULL,      -- 0 | 1
  stderr_truncated  INTEGER NOT NULL,      -- 0 | 1
  artifacts         TEXT,                  -- JSON array [{path, bytes, sha256}]
  receipt           TEXT,                  -- the full receipt JSON
  prev_hash         TEXT NOT NULL,
  hash              TEXT NOT NULL,
  caller            TEXT GENERATED ALWAYS AS (json_extract(receipt, '$.caller')) VIRTUAL,
  session_id        TEXT GENERATED ALWAYS AS (json_extract(receipt, '$.session_id')) VIRTUAL
) STRICT;
CREATE INDEX executions_workflow_started ON executions (workflow, started_at);
CREATE INDEX executions_caller ON executions (caller) WHERE caller IS NOT NULL;

-- One row per connection the proxy was asked for (CONNECT tunnel or plain-HTTP origin
-- connection), written when it ends or is refused.
CREATE TABLE connections (
  seq            INTEGER PRIMARY KEY,
  id             TEXT NOT NULL,           -- producer-generated connection id
  execution_id   TEXT,                    -- NULL for a standalone proxy
  workflow       TEXT NOT NULL,
  policy_sha256  TEXT,                    -- -> policies.sha256
  ts             INTEGER NOT NULL,        -- when the connection was asked for
  kind           TEXT,                    -- connect | http | transparent | blocked | token
  host           TEXT NOT NULL,           -- target as asked (normalised)
  port           INTEGER NOT NULL,
  resolved_ip    TEXT,                    -- the vetted address dialled; NULL if none
  decision       TEXT NOT NULL,           -- allow | deny | fail | would_deny
  rule_id        TEXT,                    -- rule that decided; NULL for a default deny
  reason         TEXT,                    -- reason code
  detail         TEXT,                    -- human-readable detail (nearest miss, ...)
  tls            TEXT,                    -- passthrough | inspect | none
  bytes_up       INTEGER NOT NULL,        -- client -> upstream
  bytes_down     INTEGER NOT NULL,        -- upstream -> client
  duration_ms    INTEGER NOT NULL,
  prev_hash      TEXT NOT NULL,
  hash           TEXT NOT NULL,
  policy_generation  INTEGER,             -- version 7 (see the top of this file)
  shadow_decision    TEXT,
  shadow_rule        TEXT
) STRICT;
CREATE INDEX connections_execution ON connections (execution_id) WHERE execution_id IS NOT NULL;
CREATE INDEX connections_workflow_ts ON connections (workflow, ts);

-- One row per HTTP request the proxy saw (plain HTTP, or inside an inspected TLS tunnel).
CREATE TABLE requests (
  seq               INTEGER PRIMARY KEY,
  id                INTEGER GENERATED ALWAYS AS (seq) VIRTUAL,  -- a request's id is its seq
  connection_id     TEXT,                 -- -> connections.id
  execution_id      TEXT,
  workflow          TEXT NOT NULL,
  ts                INTEGER NOT NULL,
  method            TEXT,
  host              TEXT,
  path              TEXT,
  status            INTEGER NOT NULL,     -- status returned to the client (403 for a refusal)
  decision          TEXT NOT NULL,        -- allow | deny | fail | would_deny
  rule_id           TEXT,
  reason            TEXT,
  injected_secrets  TEXT NOT NULL,        -- JSON array of secret NAMES (never values)
  prev_hash         TEXT NOT NULL,
  hash              TEXT NOT NULL,
  policy_generation  INTEGER,             -- version 7 (see the top of this file)
  shadow_decision    TEXT,
  shadow_rule        TEXT
) STRICT;
CREATE INDEX requests_execution ON requests (execution_id) WHERE execution_id IS NOT NULL;

-- Version 2. One row per request sent upstream, queued before its first byte leaves the proxy
-- (write-ahead): a request that reached an upstream is on record even when its exchange never
-- ends (the proxy is killed mid-response). The exchange's requests row, written when it ends,
-- completes it: same connection_id (of the last attempt), execution_id, ts, method, host and
-- path. attempt is 1, or 2 when a kept-alive upstream connection turned out closed and the
-- request was sent again on a fresh one. A forwards row without a requests row is a request
-- whose outcome was never seen.
CREATE TABLE forwards (
  seq               INTEGER PRIMARY KEY,
  connection_id     TEXT,                 -- -> connections.id (the upstream connection used)
  execution_id      TEXT,
  workflow          TEXT NOT NULL,
  ts                INTEGER NOT NULL,     -- = the requests row's ts (when it was decided)
  method            TEXT,
  host              TEXT,
  path              TEXT,
  rule_id           TEXT,
  attempt           INTEGER NOT NULL,
  injected_secrets  TEXT NOT NULL,        -- JSON array of secret NAMES (never values)
  prev_hash         TEXT NOT NULL,
  hash              TEXT NOT NULL
) STRICT;
CREATE INDEX forwards_execution ON forwards (execution_id) WHERE execution_id IS NOT NULL;

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
  hash          TEXT NOT NULL,
  policy_generation  INTEGER,   -- version 7 (see the top of this file)
  shadow_decision    TEXT,
  shadow_rule        TEXT
) STRICT;
CREATE INDEX dns_queries_execution ON dns_queries (execution_id) WHERE execution_id IS NOT NULL;

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
CREATE INDEX approvals_execution ON approvals (execution_id) WHERE execution_id IS NOT NULL;

-- Signed checkpoints (version 5; docs/audit.md "Signed checkpoints"). Not in the hash chain:
-- each row is authenticated by its Ed25519 signature over the text
-- "sluice-checkpoint v1\n<position>\n<root>\n<ts>\n". root is the RFC 9162 Merkle tree hash
-- over the chain hashes of seq 1..position (leaf = SHA-256(0x00 || 32-byte row hash)).
-- frontier is the writer's cache of the tree's right edge (hex subtree roots, largest first),
-- so a new writer resumes the tree without re-reading every row; verify recomputes it.
-- Version 6: seq is 1, 2, ... in position order (verify checks it; a writer never adds a
-- checkpoint at or before the newest one's position).
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

-- The last link of the chain (exactly one row).
CREATE TABLE chain_head (
  id    INTEGER PRIMARY KEY CHECK (id = 0),
  seq   INTEGER NOT NULL,
  hash  TEXT NOT NULL
) STRICT;
INSERT INTO chain_head (id, seq, hash)
  VALUES (0, 0, '0000000000000000000000000000000000000000000000000000000000000000');
