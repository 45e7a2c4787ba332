#!/usr/bin/env bash
# `sluice serve` latency, measured at the client, side by side with bwrap in one run:
#   bwrap --unshare-all + read-only system binds running /bin/true cold (hyperfine);
#   POST /v1/runs of /bin/true with the pool empty (--pool 0), and with a warm pool (--pool 4,
#   PACE_MS between requests so that it refills: a pool serves bursts up to its size);
#   a session's exec of /bin/true (back to back, and paced like the pooled runs);
#   a new session from the warm pool and its first exec (then deleted, untimed);
#   100 concurrent clients doing runs: runs/s and p99;
#   and the two floors no sluice request can go below on this machine: /bin/true started
#   bare (hyperfine, no sandbox) and one durable receipt commit (audit_bench).
# bwrap is also timed PACE_MS apart (hyperfine --prepare sleep), to compare paced calls with.
# The client is bench/serve_client.cpp (C++, one kept-alive Unix-socket connection per client
# thread), so that the client's own cost does not hide the server's.
# Targets (DESIGN.md): runs p50 <= 0.5x bwrap (with a warm pool), session exec p50 <= 0.4x.
# The audit store is always on: `sluice serve` has no mode without it (receipts are part of
# its answers), so --no-audit is accepted for bench/run_all.sh and changes nothing here.
# Needs root, hyperfine, bwrap and the serve_client and audit_bench targets built.
# Usage: bench/serve_latency.sh [--no-audit] [BUILD_DIR]
# Env: RUNS (sequential calls of each kind over all rounds, default 600), ROUNDS (bwrap and
#      sluice taking turns, default 3), CONCURRENT_RUNS (default 1000), CLIENTS (100),
#      PACE_MS (default 10).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/lib.sh"
bench_args "$@"
set -- "${ARGS[@]}"
[[ $AUDIT == 1 ]] || echo "serve_latency: sluice serve always records; --no-audit changes nothing" >&2
BUILD_DIR="${1:-build}"
SLUICE="$(realpath "${SLUICE:-$BUILD_DIR/cli/sluice}")"
CLIENT="$(realpath "$BUILD_DIR/bench/serve_client")"
AUDIT_BENCH="$(realpath "$BUILD_DIR/bench/audit_bench")"
RUNS="${RUNS:-600}"
ROUNDS="${ROUNDS:-3}"
CONCURRENT_RUNS="${CONCURRENT_RUNS:-1000}"
CLIENTS="${CLIENTS:-100}"
PACE="${PACE_MS:-10}"
need hyperfine hyperfine
need bwrap bubblewrap
[ "$(id -u)" = 0 ] || { echo "serve_latency: needs root" >&2; exit 1; }
for b in "$CLIENT" "$AUDIT_BENCH"; do
  [ -x "$b" ] || { echo "serve_latency: $b missing (build the serve_client and audit_bench targets)" >&2; exit 1; }
done
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
# Floors, once: /bin/true bare and one durable receipt commit.
hyperfine -N --warmup 20 --runs "$RUNS" --export-json "$TMP/true.json" -n true /bin/true \
  >/dev/null 2>&1
DURABLE=$(SLUICE_BENCH_DIR="$TMP" "$AUDIT_BENCH" --benchmark_filter=BM_DurableReceipt \
  --benchmark_format=json 2>/dev/null |
  python3 -c "import json,sys; b=json.load(sys.stdin)['benchmarks'][0]; print('nan' if b.get('error_occurred') else round(b['real_time']/1000,3))")

# ROUNDS rounds, each timing bwrap and then sluice with RUNS/ROUNDS calls of every kind: the
# 2 shared vCPUs drift in speed over minutes, and taking turns makes the drift hit both sides
# alike (as bench/run_startup.sh does); each figure is over the calls of all rounds. bwrap is
# also timed PACE_MS apart (hyperfine's --prepare sleeps before each timed run): an idle pause
# slows whatever runs next on this VM (halted vCPUs wake slowly, fsync waits longer), bwrap
# included, so paced calls are compared with bwrap paced alike. Within a round, what builds and
# destroys sandboxes comes after bwrap, with a pause before the next round: the kernel finishes
# tearing namespaces and cgroups down asynchronously (kworkers, RCU grace periods), and that
# would land on whatever is measured next.
PER_ROUND=$(( (RUNS + ROUNDS - 1) / ROUNDS ))
PACE_S=$(python3 -c "print($PACE / 1000)")
for round in $(seq "$ROUNDS"); do
  hyperfine -N --warmup 10 --runs "$PER_ROUND" --export-json "$TMP/bwrap-$round.json" \
    -n bwrap "${BWRAP[*]}" >/dev/null 2>&1
  hyperfine -N --warmup 10 --runs "$PER_ROUND" --prepare "sleep $PACE_S" \
    --export-json "$TMP/bwrap-paced-$round.json" -n bwrap-paced "${BWRAP[*]}" >/dev/null 2>&1
  "$CLIENT" "$TMP/sluice.sock" exec "$PER_ROUND" > "$TMP/exec-$round.json"
  PACE_MS="$PACE" "$CLIENT" "$TMP/sluice.sock" exec "$PER_ROUND" > "$TMP/exec-paced-$round.json"
  PACE_MS="$PACE" "$CLIENT" "$TMP/pool.sock" runs "$PER_ROUND" > "$TMP/pool-$round.json"
  PACE_MS="$PACE" "$CLIENT" "$TMP/pool.sock" session "$(( (PER_ROUND + 2) / 3 ))" \
    > "$TMP/session-$round.json"
  "$CLIENT" "$TMP/sluice.sock" runs "$PER_ROUND" > "$TMP/run-$round.json"
  sleep 1
done
CONC=$("$CLIENT" "$TMP/sluice.sock" concurrent "$CONCURRENT_RUNS" "$CLIENTS")
python3 - "$TMP" "$ROUNDS" "$DURABLE" "$CONC" "$PACE" <<'PY'
import json, os, statistics, sys
def result(key, value):  # one figure for bench/run_all.sh's table
    if os.environ.get("RESULTS"):
        with open(os.environ["RESULTS"], "a") as f:
            f.write(f"{key} {value}\n")
def summary(ms):  # p50 and p99 of pooled samples (ms), as serve_client computes them
    t = sorted(ms)
    return statistics.median(t), t[min(len(t) - 1, int(len(t) * 0.99))]
tmp, rounds = sys.argv[1], int(sys.argv[2])
round_p50 = {}  # name -> the p50 of each round, for the spread of the ratios
def hf(name):  # hyperfine's times of every round, in ms
    ms = []
    for r in range(1, rounds + 1):
        path = f"{tmp}/{name}.json" if name == "true" else f"{tmp}/{name}-{r}.json"
        times = [x * 1000 for x in json.load(open(path))["results"][0]["times"]]
        round_p50.setdefault(name, []).append(statistics.median(times))
        ms += times
        if name == "true":
            break
    return summary(ms)
def client(kind):  # serve_client's calls of every round
    ms, errors, n_rounds = [], 0, []
    for r in range(1, rounds + 1):
        j = json.load(open(f"{tmp}/{kind}-{r}.json"))
        ms += j.get("ms", [])
        errors += j["errors"]
        n_rounds.append(j["p50_ms"] if j.get("n") else float("nan"))
    p50, p99 = summary(ms) if ms else (float("nan"), float("nan"))
    return {"p50_ms": p50, "p99_ms": p99, "errors": errors, "round_p50s": n_rounds}
bwrap, bwrap99 = hf("bwrap")
true50, _ = hf("true")
durable = float(sys.argv[3])
conc = json.loads(sys.argv[4])
pace = sys.argv[5]
bwrap_paced, bwrap_paced99 = hf("bwrap-paced")
run, pool, ex, paced, sess = (client(k) for k in ("run", "pool", "exec", "exec-paced", "session"))
print(f"{rounds} rounds, bwrap and sluice taking turns; every figure is over the calls of all rounds")
def line(name, r, target=None, paced=False):
    # Paced calls: the ratio to bwrap paced alike decides; the one to bwrap back to back shows.
    base = bwrap_paced if paced else bwrap
    x = r["p50_ms"] / base
    t = "" if target is None else f"  target <= {target}x: {'met' if x <= target else 'NOT met'}"
    also = f" ({r['p50_ms'] / bwrap:.2f}x back to back)" if paced else ""
    print(f"{name:<44} p50 {r['p50_ms']:7.3f} ms  p99 {r['p99_ms']:7.3f} ms  = {x:.2f}x bwrap"
          f"{' paced' if paced else ''}{also}  errors {r['errors']}{t}")
    if target is not None and rounds > 1:  # the same ratio round by round: how much it moves
        bases = round_p50["bwrap-paced" if paced else "bwrap"]
        print(f"{'':<44} by round: " +
              ", ".join(f"{a / b:.3f}x" for a, b in zip(r["round_p50s"], bases)))
print(f"{'bwrap --unshare-all /bin/true (cold)':<44} p50 {bwrap:7.3f} ms  p99 {bwrap99:7.3f} ms")
print(f"{'bwrap, the same, ' + pace + ' ms apart':<44} p50 {bwrap_paced:7.3f} ms  p99 "
      f"{bwrap_paced99:7.3f} ms")
line("POST /v1/runs /bin/true (pool empty)", run)
line(f"POST /v1/runs /bin/true (pool warm, {pace} ms apart)", pool, 0.5, paced=True)
line("session exec /bin/true (back to back)", ex, 0.4)
line(f"session exec /bin/true ({pace} ms apart)", paced, paced=True)
line(f"new session (pool) + its first exec ({pace} ms apart)", sess, paced=True)
result("serve.bwrap_ms", bwrap)
result("serve.bwrap_paced_ms", bwrap_paced)
result("serve.pool_p50_ms", pool["p50_ms"])
result("serve.pool_p99_ms", pool["p99_ms"])
result("serve.exec_p50_ms", ex["p50_ms"])
result("serve.exec_p99_ms", ex["p99_ms"])
print(f"{conc['n']} runs by 100 concurrent clients{'':<13} {conc['per_s']:8.1f} runs/s  p50 "
      f"{conc['p50_ms']:.1f} ms  p99 {conc['p99_ms']:.1f} ms  errors {conc['errors']}  "
      f"refused by the --max-runs quota (429, not in the figures) {conc.get('refused', 0)}")
if durable != durable:  # NaN: audit_bench failed
    print(f"floors: /bin/true started bare (no sandbox) p50 {true50:.3f} ms = "
          f"{true50 / bwrap:.2f}x bwrap; durable receipt commit: audit_bench failed")
else:
    print(f"floors: /bin/true started bare (no sandbox) p50 {true50:.3f} ms, one durable receipt "
          f"commit {durable:.3f} ms; together {true50 + durable:.3f} ms = "
          f"{(true50 + durable) / bwrap:.2f}x bwrap")
PY
