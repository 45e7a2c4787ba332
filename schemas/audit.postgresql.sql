-- The central audit store in PostgreSQL (docs/audit.md, "Central audit in PostgreSQL"): every
-- node's rows, as `sluice audit ship` copies them from its SQLite store, keyed by (node, seq).
-- `sluice audit ship` creates this schema when it is missing (in the connection's search_path).
--
-- The chained tables (executions, connections, requests, forwards, dns_queries, approvals,
-- policies) are not written out here: ship creates each from the one column description
-- (audit/src/rows.hpp) with the types schemas/audit.sql gives those columns, as
--   CREATE TABLE <table> (node TEXT NOT NULL, seq BIGINT NOT NULL, prev_hash TEXT NOT NULL,
--                         hash TEXT NOT NULL, <hashed columns: INTEGER -> BIGINT, TEXT -> TEXT>,
--                         PRIMARY KEY (node, seq))
-- Values are stored exactly as the node stored them (JSON columns as their text), so
-- `sluice audit verify --db 'postgresql://...?node=N'` recomputes every row hash.

-- Where each node's shipping stands: advanced in the same transaction as each batch, so a ship
-- that dies mid-batch loses and doubles nothing. seq/hash are the node's chain head here.
CREATE TABLE IF NOT EXISTS ship_positions (
  node            TEXT PRIMARY KEY,
  seq             BIGINT NOT NULL,  -- last chained seq shipped (0: none)
  hash            TEXT NOT NULL,    -- its row hash (the genesis hash when none)
  checkpoint_seq  BIGINT NOT NULL,  -- last checkpoint shipped (0: none)
  shipped_at      BIGINT NOT NULL   -- epoch ms of the last batch
);

-- The node's signed checkpoints, as in schemas/audit.sql (shipped once the rows they cover are).
CREATE TABLE IF NOT EXISTS checkpoints (
  node       TEXT NOT NULL,
  seq        BIGINT NOT NULL,
  position   BIGINT NOT NULL,
  root       TEXT NOT NULL,
  signature  TEXT NOT NULL,
  key_id     TEXT NOT NULL,
  ts         BIGINT NOT NULL,
  frontier   TEXT NOT NULL,
  PRIMARY KEY (node, seq)
);
