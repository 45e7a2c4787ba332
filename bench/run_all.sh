#!/usr/bin/env bash
# The whole performance table in one run (what `make bench` does after building): each
# side-by-side script runs sluice with its audit store ON (as users run it) beside its peer
# (Squid, Squid ssl-bump, a direct loopback download, a raw SQLite ceiling, bwrap), then one
# table prints every row with both figures, the ratio, p50/p99 where they apply, and the goal
# with PASS or MISS. docs/benchmarks.md says how to read it.
#
# Usage: bench/run_all.sh [--no-audit] [BUILD_DIR]        (default BUILD_DIR: build)
# Env:   SMOKE=1     a check that everything runs (< 2 min): short runs, one round, no
#                    micro-benchmarks beyond the audit rows; its figures mean nothing;
#        MICRO=0     leave out the Google Benchmark micro-benchmarks (policy, TLS minting,
#                    SigV4, bodies); the audit rows of the table always run;
#        DURATION, ROUNDS   passed to proxy_vs_squid.sh and tls_vs_passthrough.sh (seconds per
#                    load run, alternating rounds) to shorten or lengthen the load runs;
#        AUDIT_REPS  repetitions of the audit-row benchmarks (default 15; SMOKE=1: 1).
# Needs root (sandboxes), and installs the peers (Debian packages) when they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
bench_args "$@"
set -- "${ARGS[@]}"
BUILD_DIR="${1:-build}"
SLUICE="$BUILD_DIR/cli/sluice"
SMOKE="${SMOKE:-0}"
MICRO="${MICRO:-$([[ $SMOKE == 1 ]] && echo 0 || echo 1)}"
AUDIT_OPT=()
[[ $AUDIT == 1 ]] || AUDIT_OPT=(--no-audit)

RESULTS=$(mktemp /tmp/sluice-bench-results.XXXXXX)
AUDIT_JSON=$(mktemp /tmp/sluice-bench-audit.XXXXXX)
export RESULTS
trap 'rm -f "$RESULTS" "$AUDIT_JSON"' EXIT
START=$(date +%s)

section() { printf '\n=== %s ===\n' "$1"; }
micro() {  # micro NAME: a Google Benchmark binary, 3 repetitions, when built
  if [[ $MICRO == 1 && -x "$BUILD_DIR/bench/$1" ]]; then
    section "$1"
    "$BUILD_DIR/bench/$1" --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
  fi
}

# Per-script lengths: the defaults of each script, or a few seconds each for SMOKE=1.
if [[ $SMOKE == 1 ]]; then
  PROXY_ENV=(DURATION=2 ROUNDS=1 RUNS=1 TUNNELS=0)
  TLS_ENV=(DURATION=1 ROUNDS=1 "MODES=new reuse")
  STARTUP_ENV=(RUNS=20 ROUNDS=2 WARMUP=3 TIMING_RUNS=5)
  SERVE_ENV=(RUNS=30 ROUNDS=1 CONCURRENT_RUNS=100)
  AUDIT_REPS=1
else
  PROXY_ENV=(${DURATION:+DURATION=$DURATION} ${ROUNDS:+ROUNDS=$ROUNDS})
  TLS_ENV=(${DURATION:+DURATION=$DURATION} ${ROUNDS:+ROUNDS=$ROUNDS})
  STARTUP_ENV=()
  SERVE_ENV=()
  # The signing cost is the difference of two medians a few per cent apart at most: with 5
  # repetitions each it moved between -3% and +6% from one run to the next with nothing
  # changed; with 15 (about 30 s more), between -0.1% and 2.8% (docs/benchmarks.md).
  AUDIT_REPS=${AUDIT_REPS:-15}
fi

# What this machine charges for a page fault, a system call and a wake-up (bench/host_costs.cpp):
# printed under the table, since they move the ratios from one machine to another.
if [[ -x "$BUILD_DIR/bench/host_costs" ]]; then
  section "this machine's kernel costs (bench/host_costs)"
  "$BUILD_DIR/bench/host_costs" | tee -a "$RESULTS"
fi

micro policy_bench

# The audit rows: the store's sustained rate (signing off and on) and the raw SQLite ceiling,
# repetitions interleaved at random so a burst of load from elsewhere hits all three alike.
section "audit store vs raw SQLite ceiling (bench/audit_bench)"
"$BUILD_DIR/bench/audit_bench" \
  --benchmark_filter='BM_ConnectionEventsSustained/1/4096/|BM_RawSqliteCeiling' \
  --benchmark_repetitions="$AUDIT_REPS" --benchmark_enable_random_interleaving=true \
  --benchmark_report_aggregates_only=true \
  --benchmark_out="$AUDIT_JSON" --benchmark_out_format=json
if [[ $MICRO == 1 ]]; then
  section "audit store, the rest (bench/audit_bench)"
  "$BUILD_DIR/bench/audit_bench" --benchmark_filter='-BM_ConnectionEventsSustained/1/4096/|BM_RawSqliteCeiling' \
    --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
fi
micro tls_bench
micro sigv4_bench
micro body_bench
micro replay_bench

section "sandbox start-up vs bwrap (bench/run_startup.sh)"
env "${STARTUP_ENV[@]}" bench/run_startup.sh "${AUDIT_OPT[@]}" "$BUILD_DIR"

section "sluice serve vs bwrap (bench/serve_latency.sh)"
env "${SERVE_ENV[@]}" bench/serve_latency.sh "${AUDIT_OPT[@]}" "$BUILD_DIR"

section "proxy vs Squid (bench/proxy_vs_squid.sh)"
env "${PROXY_ENV[@]}" bench/proxy_vs_squid.sh "${AUDIT_OPT[@]}" "$SLUICE" "$BUILD_DIR/bench/splice_relay"

section "inspected TLS vs passthrough and Squid ssl-bump (bench/tls_vs_passthrough.sh)"
env "${TLS_ENV[@]}" bench/tls_vs_passthrough.sh "${AUDIT_OPT[@]}" "$SLUICE" "$BUILD_DIR/bench/tls_load" \
  "$BUILD_DIR/bench/tls_relay"

if [[ $SMOKE != 1 ]]; then
  section "the .deb: size and install-to-first-run (bench/package.sh)"
  bench/package.sh "$BUILD_DIR"
fi

section "the table"
python3 bench/table.py "$RESULTS" "$AUDIT_JSON" "$AUDIT" "$SMOKE" "$(( $(date +%s) - START ))"
