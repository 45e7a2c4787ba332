#!/usr/bin/env bash
# `sluice audit ship` into PostgreSQL on loopback (a throwaway cluster on a Unix socket, as the
# tests start it: tests/audit_pg/pg_cluster.sh):
#   1. rows/s: ROWS connection rows already in the store, one `ship --once` (default batch);
#   2. lag under load: a follow ship while audit_load writes RATE rows/s for DURATION s; sampled
#      every 100 ms: the store's head minus the shipped position (rows behind; at RATE rows/s,
#      RATE rows = 1 s); median and max, and how long the ship takes to catch up at the end.
# Usage: bench/audit_ship.sh [BUILD_DIR]   (env: ROWS=200000 RATE=1000 DURATION=30; SMOKE=1:
#        ROWS=5000 DURATION=3). Needs PostgreSQL (Debian: postgresql) and sqlite3.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
BUILD_DIR="${1:-build}"
SLUICE="$(realpath "${SLUICE:-$BUILD_DIR/cli/sluice}")"
LOAD="$(realpath "$BUILD_DIR/bench/audit_load")"
CLUSTER="$(realpath "$(dirname "$0")/../tests/audit_pg/pg_cluster.sh")"
if [[ "${SMOKE:-0}" == 1 ]]; then ROWS=${ROWS:-5000} DURATION=${DURATION:-3}; fi
ROWS=${ROWS:-200000}
RATE=${RATE:-1000}
DURATION=${DURATION:-30}

bench_init sluice-bench-ship
chmod 755 "$TMP"
PG="$TMP/pg"
stop_cluster() {  # the ship first, then the cluster it is connected to
  bench_stop
  "$CLUSTER" stop "$PG" || true
  bench_cleanup
}
trap stop_cluster EXIT
"$CLUSTER" start "$PG"
[[ -S "$PG/.s.PGSQL.5432" ]] || { echo "audit_ship: no PostgreSQL server" >&2; exit 1; }
URI="postgresql:///postgres?host=$PG&user=postgres"
position() { psql -X -At "$URI" -c "SELECT coalesce(max(seq), 0) FROM ship_positions WHERE node = '$1'"; }
now_ms() { date +%s%3N; }

echo "== rows/s into PostgreSQL (one ship --once of $ROWS rows)"
"$LOAD" "$TMP/bulk.db" "$ROWS"
t0=$(now_ms)
"$SLUICE" audit ship --once --db "$TMP/bulk.db" --to "$URI" --node bulk >/dev/null
t1=$(now_ms)
echo "shipped $ROWS rows in $((t1 - t0)) ms: $((ROWS * 1000 / (t1 - t0 + 1))) rows/s"

echo "== lag under $RATE rows/s for $DURATION s (follow ship, --interval-ms 50)"
"$LOAD" "$TMP/live.db" 1  # the store exists before the ship opens it
"$SLUICE" audit ship --db "$TMP/live.db" --to "$URI" --node live --interval-ms 50 >/dev/null &
PIDS+=($!)
"$LOAD" "$TMP/live.db" $((RATE * DURATION)) "$RATE" &
load_pid=$!
PIDS+=($load_pid)
: >"$TMP/lag"
while kill -0 "$load_pid" 2>/dev/null; do
  shipped=$(position live)  # before the head: the head only grows
  head=$(sqlite3 "$TMP/live.db" "SELECT seq FROM chain_head")
  echo $((head - shipped)) >>"$TMP/lag"
  sleep 0.1
done
wait "$load_pid"
head=$(sqlite3 "$TMP/live.db" "SELECT seq FROM chain_head")
t0=$(now_ms)
while (($(position live) < head)); do sleep 0.01; done
t1=$(now_ms)
echo "lag (rows behind the store, sampled every 100 ms): median $(median <"$TMP/lag"), max $(sort -g "$TMP/lag" | tail -1)"
echo "caught up $((t1 - t0)) ms after the load stopped ($head rows)"
