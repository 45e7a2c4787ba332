#!/usr/bin/env python3
"""What an audited plain-HTTP request costs the audit store's WAL, and what each index adds.

The proxy's row pattern on the real schema (schemas/audit.sql), through SQLite itself: per
request a `forwards` row and a `requests` row on one of CONNS kept-alive connections, PER_COMMIT
requests per transaction (a 5 ms batch at ~27,000 requests/s is ~135), the chain head read and
updated once per transaction, the store's pragmas (WAL, synchronous=NORMAL, 32 MiB cache). After
a warm-up it counts the WAL frames the commits append (automatic checkpoints off) and the CPU
per request, then repeats with indexes dropped or another page size, to say what each costs (or a
partial index without the NULL keys a standalone proxy writes).
Row values are the proxy's (hash columns are fixed text of the real width; nothing is hashed).
CPU includes Python's own per-statement overhead: compare variants, not absolute figures.

Usage: bench/audit_wal_pages.py [schemas/audit.sql]      (database files under /var/tmp)
"""
import os
import random
import shutil
import sqlite3
import sys
import tempfile
import time

SCHEMA = open(sys.argv[1] if len(sys.argv) > 1 else
              os.path.join(os.path.dirname(__file__), "..", "schemas", "audit.sql")).read()
HASH = "ab" * 32
FORWARD = ("INSERT INTO forwards (seq, prev_hash, hash, connection_id, execution_id, workflow, ts,"
           " method, host, path, rule_id, attempt, injected_secrets) VALUES"
           " (?, ?, ?, ?, NULL, 'bench', ?, 'GET', '127.0.0.1', '/small', 'nginx', 1, '[]')")
REQUEST = ("INSERT INTO requests (seq, prev_hash, hash, connection_id, execution_id, workflow, ts,"
           " method, host, path, status, decision, rule_id, reason, injected_secrets,"
           " policy_generation) VALUES (?, ?, ?, ?, NULL, 'bench', ?, 'GET', '127.0.0.1',"
           " '/small', 200, 'allow', 'nginx', 'allowed', '[]', 1)")


def open_db(path, page_size, drop, partial):
    db = sqlite3.connect(path, isolation_level=None)
    db.execute(f"PRAGMA page_size={page_size}")
    db.executescript(SCHEMA)
    for index in drop:
        db.execute(f"DROP INDEX {index}")
    for index in partial:  # "<table>_execution" on execution_id again, without its NULL keys
        table = index.split("_")[0]
        db.execute(f"DROP INDEX {index}")
        db.execute(f"CREATE INDEX {index} ON {table} (execution_id)"
                   " WHERE execution_id IS NOT NULL")
    for pragma in ("journal_mode=WAL", "synchronous=NORMAL", "cache_size=-32768",
                   "wal_autocheckpoint=0"):
        db.execute(f"PRAGMA {pragma}")
    return db


def transaction(db, state, conns, per_commit):
    db.execute("BEGIN IMMEDIATE")
    db.execute("SELECT seq, hash FROM chain_head WHERE id = 0").fetchall()
    for _ in range(per_commit):
        conn = f"c-888994b5-{random.randrange(conns) + 1}"
        ts = 1_795_753_965_126 + state["seq"]
        db.execute(FORWARD, (state["seq"] + 1, HASH, HASH, conn, ts))
        db.execute(REQUEST, (state["seq"] + 2, HASH, HASH, conn, ts))
        state["seq"] += 2
    db.execute("UPDATE chain_head SET seq = ?, hash = ? WHERE id = 0", (state["seq"], HASH))
    db.execute("COMMIT")


def measure(label, drop=(), partial=(), page_size=4096, conns=50, per_commit=135, warm=300, commits=300):
    work = tempfile.mkdtemp(prefix="sluice-wal-pages-", dir="/var/tmp")
    try:
        path = os.path.join(work, "audit.db")
        db = open_db(path, page_size, drop, partial)
        state = {"seq": 0}
        for _ in range(warm):
            transaction(db, state, conns, per_commit)
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        t0 = time.process_time()
        for _ in range(commits):
            transaction(db, state, conns, per_commit)
        cpu = time.process_time() - t0
        wal = os.path.getsize(path + "-wal") - 32  # the WAL header
        db.close()
    finally:
        shutil.rmtree(work)
    requests = commits * per_commit
    print(f"| {label} | {page_size} | {conns} | {per_commit} | {wal / (page_size + 24) / commits:.1f}"
          f" | {wal / requests:.0f} | {cpu / requests * 1e6:.1f} |")


def main():
    random.seed(1)
    print("| variant | page size | connections | requests/commit | WAL pages/commit"
          " | WAL bytes/request | CPU us/request |")
    print("|---|---|---|---|---|---|---|")
    execution = ("forwards_execution", "requests_execution")
    measure("schema as it is")
    measure("without requests_connection", drop=("requests_connection",))
    measure("without the two execution_id indexes", drop=execution)
    measure("without all three", drop=("requests_connection",) + execution)
    measure("execution_id indexes partial (WHERE execution_id IS NOT NULL)", partial=execution)
    measure("without requests_connection, execution_id indexes partial",
            drop=("requests_connection",), partial=execution)
    measure("schema as it is", page_size=1024)
    measure("schema as it is", page_size=2048)
    for per_commit in (50, 540):
        measure("schema as it is", per_commit=per_commit)
        measure("without requests_connection", drop=("requests_connection",),
                per_commit=per_commit)
    for conns in (10, 200):
        measure("schema as it is", conns=conns)


if __name__ == "__main__":
    main()
