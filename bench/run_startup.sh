#!/usr/bin/env bash
# Start-up cost of one sandboxed execution, side by side (hyperfine, same run):
#   sluice run -- /bin/true   full isolation: namespaces, pivot_root, cgroups, seccomp, Landlock,
#                             proxy listener in the sandbox netns handed to the in-process
#                             proxy, receipt committed durably to the audit store
#   bwrap --unshare-all ...   read-only system binds, /proc, /dev, /tmp, /bin/true
#   unshare --net --pid --mount --fork /bin/true
# Target (DESIGN.md): sluice's median <= 2x bwrap's. Also prints where sluice's time goes
# (SLUICE_TIMING=1 phases, medians over the runs). Needs root, hyperfine and bwrap.
# Usage: bench/run_startup.sh [BUILD_DIR]     (env: RUNS=200 WARMUP=20 SLUICE=path)
set -euo pipefail
BUILD_DIR="${1:-build}"
SLUICE="${SLUICE:-$BUILD_DIR/cli/sluice}"
SLUICE="$(realpath "$SLUICE")"
RUNS="${RUNS:-200}"
WARMUP="${WARMUP:-20}"
for tool in hyperfine bwrap unshare python3; do
  command -v "$tool" >/dev/null || { echo "run_startup: $tool is missing" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "run_startup: needs root (sluice run)" >&2; exit 1; }

TMP="$(mktemp -d /tmp/sluice-bench-startup.XXXXXX)"
trap 'rm -rf "$TMP"' EXIT
cat > "$TMP/bench.yaml" <<'YAML'
apiVersion: sluice/v1
kind: Workflow
name: bench-startup
description: start-up benchmark; the proxy listener is created but never used
sandbox:
  timeout: 30s
  network: proxy
egress:
  rules:
    - id: nothing-real
      action: allow
      hosts: ["example.invalid"]
YAML

BWRAP=(bwrap --unshare-all --die-with-parent --ro-bind /usr /usr)
for d in bin sbin lib lib32 lib64 libx32; do
  if [ -L "/$d" ]; then BWRAP+=(--symlink "$(readlink "/$d")" "/$d");
  elif [ -d "/$d" ]; then BWRAP+=(--ro-bind "/$d" "/$d"); fi
done
BWRAP+=(--proc /proc --dev /dev --tmpfs /tmp /bin/true)

hyperfine -N --warmup "$WARMUP" --runs "$RUNS" --export-json "$TMP/result.json" \
  -n "sluice run (full, receipt committed)" \
  "$SLUICE run --policy $TMP/bench.yaml --audit $TMP/audit.db -- /bin/true" \
  -n "sluice run (no audit store)" \
  "$SLUICE run --policy $TMP/bench.yaml --audit '' -- /bin/true" \
  -n "bwrap --unshare-all" "${BWRAP[*]}" \
  -n "unshare --net --pid --mount --fork" "unshare --net --pid --mount --fork /bin/true" \
  >/dev/null

# Phase breakdown: the same full command, SLUICE_TIMING=1, median per phase.
for _ in $(seq 50); do
  SLUICE_TIMING=1 "$SLUICE" run --policy "$TMP/bench.yaml" --audit "$TMP/audit.db" -- /bin/true \
    2>>"$TMP/timing.txt" >/dev/null
done

python3 - "$TMP/result.json" "$TMP/timing.txt" <<'PY'
import json, statistics, sys, collections
res = json.load(open(sys.argv[1]))["results"]
med = {r["command"]: statistics.median(r["times"]) * 1000 for r in res}
bw = med["bwrap --unshare-all"]
print(f"{'command':40} {'median ms':>10} {'vs bwrap':>9}")
for name, m in med.items():
    print(f"{name:40} {m:10.2f} {m / bw:8.2f}x")
full = med["sluice run (full, receipt committed)"]
print(f"\ntarget: sluice <= 2x bwrap -> {'MET' if full <= 2 * bw else 'NOT MET'} ({full / bw:.2f}x)")
phases = collections.OrderedDict()
for line in open(sys.argv[2]):
    if line.startswith("timing: "):
        name, ms = line[8:].rsplit(None, 2)[0].strip(), float(line.split()[-2])
        phases.setdefault(name, []).append(ms)
print("\nwhere sluice's time goes (median of 50 runs, SLUICE_TIMING=1; process start-up and")
print("dynamic linking, ~1-2 ms, come before the first phase):")
for name, v in phases.items():
    print(f"  {name:54} {statistics.median(v):7.3f} ms")
PY
