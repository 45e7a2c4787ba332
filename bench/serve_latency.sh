#!/usr/bin/env bash
# `sluice serve` latency, measured at the client, side by side with bwrap in one run:
#   bwrap --unshare-all + read-only system binds running /bin/true cold (hyperfine);
#   POST /v1/runs of /bin/true with the pool empty (--pool 0), and with a warm pool (--pool 4,
#   PACE_MS between requests so that it refills: a pool serves bursts up to its size);
#   a session's exec of /bin/true;
#   100 concurrent clients doing runs: runs/s and p99.
# Targets (DESIGN.md): runs p50 <= 0.5x bwrap (with a warm pool), session exec p50 <= 0.25x.
# Needs root, hyperfine and bwrap. Usage: bench/serve_latency.sh [BUILD_DIR]
# Env: RUNS (sequential calls, default 300), CONCURRENT_RUNS (default 1000), CLIENTS (100).
set -euo pipefail
BUILD_DIR="${1:-build}"
SLUICE="$(realpath "${SLUICE:-$BUILD_DIR/cli/sluice}")"
RUNS="${RUNS:-300}"
CONCURRENT_RUNS="${CONCURRENT_RUNS:-1000}"
CLIENTS="${CLIENTS:-100}"
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/lib.sh"
need hyperfine hyperfine
need bwrap bubblewrap
[ "$(id -u)" = 0 ] || { echo "serve_latency: needs root" >&2; exit 1; }
bench_init sluice-bench-serve
mkdir -p "$TMP/policies"
cat > "$TMP/policies/bench.yaml" <<'YAML'
apiVersion: sluice/v1
kind: Workflow
name: bench
description: serve latency benchmark
sandbox:
  timeout: 30s
  pids: 256
  network: none
YAML
"$SLUICE" serve --policy-dir "$TMP/policies" --listen "unix:$TMP/sluice.sock" \
  --audit "$TMP/audit.db" --max-sessions 8 2>"$TMP/serve.log" &
PIDS+=($!)
"$SLUICE" serve --policy-dir "$TMP/policies" --listen "unix:$TMP/pool.sock" \
  --audit "$TMP/audit-pool.db" --pool 4 2>"$TMP/serve-pool.log" &
PIDS+=($!)
for _ in $(seq 100); do [ -S "$TMP/sluice.sock" ] && [ -S "$TMP/pool.sock" ] && break; sleep 0.05; done
sleep 1  # the pool fills

BWRAP=($(bwrap_true))
hyperfine -N --warmup 20 --runs "$RUNS" --export-json "$TMP/bwrap.json" -n bwrap "${BWRAP[*]}" \
  >/dev/null 2>&1
BWRAP_MS=$(python3 -c "import json,statistics; r=json.load(open('$TMP/bwrap.json'))['results'][0]['times']; print(round(statistics.median(r)*1000,3))")

RUN=$(python3 "$HERE/serve_load.py" "$TMP/sluice.sock" runs "$RUNS")
POOL=$(PACE_MS="${PACE_MS:-10}" python3 "$HERE/serve_load.py" "$TMP/pool.sock" runs "$RUNS")
EXEC=$(python3 "$HERE/serve_load.py" "$TMP/sluice.sock" exec "$RUNS")
CONC=$(python3 "$HERE/serve_load.py" "$TMP/sluice.sock" concurrent "$CONCURRENT_RUNS" "$CLIENTS")
python3 - "$BWRAP_MS" "$RUN" "$EXEC" "$CONC" "$POOL" <<'PY'
import json, sys
bwrap = float(sys.argv[1]); run, ex, conc, pool = (json.loads(a) for a in sys.argv[2:6])
print(f"bwrap --unshare-all /bin/true (cold)     p50 {bwrap:8.3f} ms")
print(f"POST /v1/runs /bin/true (pool empty)      p50 {run['p50_ms']:8.3f} ms  p99 {run['p99_ms']:8.3f} ms"
      f"  = {run['p50_ms']/bwrap:.2f}x bwrap  errors {run['errors']}")
print(f"POST /v1/runs /bin/true (pool warm)       p50 {pool['p50_ms']:8.3f} ms  p99 {pool['p99_ms']:8.3f} ms"
      f"  = {pool['p50_ms']/bwrap:.2f}x bwrap  errors {pool['errors']}")
print(f"session exec /bin/true                    p50 {ex['p50_ms']:8.3f} ms  p99 {ex['p99_ms']:8.3f} ms"
      f"  = {ex['p50_ms']/bwrap:.2f}x bwrap  errors {ex['errors']}")
print(f"{conc['n']} runs by 100 concurrent clients       {conc['per_s']:8.1f} runs/s  p50 "
      f"{conc['p50_ms']:.1f} ms  p99 {conc['p99_ms']:.1f} ms  errors {conc['errors']}")
PY
