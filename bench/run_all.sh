#!/usr/bin/env bash
# Runs every benchmark in one go (what `make bench` does after building). Each prints its own
# figures; docs/benchmarks.md says how to read them. Usage: bench/run_all.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${1:-build}"
SLUICE="$BUILD_DIR/cli/sluice"

section() { printf '\n=== %s ===\n' "$1"; }

section "policy decisions (bench/policy_bench)"
"$BUILD_DIR/bench/policy_bench" --benchmark_repetitions=3 --benchmark_report_aggregates_only=true

section "audit store (bench/audit_bench)"
"$BUILD_DIR/bench/audit_bench" --benchmark_repetitions=3 --benchmark_report_aggregates_only=true

if [[ -x "$BUILD_DIR/bench/tls_bench" ]]; then
  section "certificate minting (bench/tls_bench)"
  "$BUILD_DIR/bench/tls_bench" --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
fi

if [[ -x "$BUILD_DIR/bench/sigv4_bench" ]]; then
  section "SigV4 re-signing (bench/sigv4_bench)"
  "$BUILD_DIR/bench/sigv4_bench" --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
fi

if [[ -x "$BUILD_DIR/bench/body_bench" ]]; then
  section "placeholders in bodies, HMAC signing, WebSocket text relay (bench/body_bench)"
  "$BUILD_DIR/bench/body_bench" --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
fi

section "sandbox start-up vs bwrap (bench/run_startup.sh)"
bench/run_startup.sh "$BUILD_DIR"

section "proxy vs Squid (bench/proxy_vs_squid.sh)"
bench/proxy_vs_squid.sh "$SLUICE"

section "inspected TLS vs passthrough (bench/tls_vs_passthrough.sh)"
bench/tls_vs_passthrough.sh "$SLUICE" "$BUILD_DIR/bench/tls_load"

section "the .deb: size and install-to-first-run (bench/package.sh)"
bench/package.sh "$BUILD_DIR"
