#!/usr/bin/env bash
# Start-up cost of one sandboxed execution, side by side (hyperfine, same run):
#   sluice run -- /bin/true   full isolation: namespaces, pivot_root, cgroups, seccomp, Landlock,
#                             proxy listener in the sandbox netns handed to the in-process
#                             proxy, receipt committed durably to the audit store
#   bwrap --unshare-all ...   read-only system binds, /proc, /dev, /tmp, /bin/true
#   unshare --net --pid --mount --fork /bin/true
# Target (DESIGN.md): sluice's median <= 1.8x bwrap's (the full run, receipt committed; with
# --no-audit the "full" command runs with --audit '' as well). Also prints where sluice's time goes
# (SLUICE_TIMING=1 phases, medians over the runs). Needs root, hyperfine and bwrap.
# Usage: bench/run_startup.sh [--no-audit] [BUILD_DIR]     (env: RUNS=200 ROUNDS=5 WARMUP=20
#        TIMING_RUNS=50 SLUICE=path
#        BASELINE=path: another sluice binary, e.g. a build before a change, measured in the same
#        rounds as "sluice run (baseline binary)" so a before/after comparison shares the load)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
bench_args "$@"
set -- "${ARGS[@]}"
BUILD_DIR="${1:-build}"
SLUICE="${SLUICE:-$BUILD_DIR/cli/sluice}"
SLUICE="$(realpath "$SLUICE")"
RUNS="${RUNS:-200}"
WARMUP="${WARMUP:-20}"
for tool in hyperfine bwrap unshare python3; do
  command -v "$tool" >/dev/null || { echo "run_startup: $tool is missing" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "run_startup: needs root (sluice run)" >&2; exit 1; }

bench_init sluice-bench-startup
FULL_AUDIT="$TMP/audit.db"
[[ $AUDIT == 1 ]] || FULL_AUDIT="''"
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

BWRAP=($(bwrap_true))
EXTRA=()
if [[ -n "${BASELINE:-}" ]]; then
  EXTRA=(-n "sluice run (baseline binary)"
         "$(realpath "$BASELINE") run --policy $TMP/bench.yaml --audit $TMP/audit-base.db -- /bin/true")
fi

# Rounds: the machine's speed drifts (2 shared cores), so the commands take turns — ROUNDS
# hyperfine runs of RUNS/ROUNDS each — and each command's median is over all its runs.
ROUNDS="${ROUNDS:-5}"
PER_ROUND=$(( (RUNS + ROUNDS - 1) / ROUNDS ))
FULL_CMD="$SLUICE run --policy $TMP/bench.yaml --audit $FULL_AUDIT -- /bin/true"
for round in $(seq "$ROUNDS"); do
  hyperfine -N --warmup "$WARMUP" --runs "$PER_ROUND" --export-json "$TMP/result-$round.json" \
    -n "sluice run (full, receipt committed)" "$FULL_CMD" \
    -n "sluice run (no audit store)" \
    "$SLUICE run --policy $TMP/bench.yaml --audit '' -- /bin/true" \
    -n "bwrap --unshare-all" "${BWRAP[*]}" \
    -n "unshare --net --pid --mount --fork" "unshare --net --pid --mount --fork /bin/true" \
    "${EXTRA[@]}" >/dev/null 2>&1
done

# Phase breakdown: the same full command, SLUICE_TIMING=1, median per phase.
export TIMING_RUNS="${TIMING_RUNS:-50}"
[[ $AUDIT == 1 ]] || FULL_AUDIT=""
for _ in $(seq "$TIMING_RUNS"); do
  SLUICE_TIMING=1 "$SLUICE" run --policy "$TMP/bench.yaml" --audit "$FULL_AUDIT" -- /bin/true \
    2>>"$TMP/timing.txt" >/dev/null
done

# The medians, then what each start costs the machine besides its time: page faults and CPU
# per start (every process of it, from getrusage of the children), which another machine may
# charge more for (bench/host_costs; docs/benchmarks.md, "Reading a table from another
# machine"), then the phases.
python3 - "$TMP" "$TMP/timing.txt" "$FULL_CMD" "${BWRAP[*]}" <<'PY'
import json, os, resource, shlex, statistics, subprocess, sys, collections
import glob
def result(key, value):  # one figure for bench/run_all.sh's table
    if os.environ.get("RESULTS"):
        with open(os.environ["RESULTS"], "a") as f:
            f.write(f"{key} {value}\n")
times = collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1] + "/result-*.json")):
    for r in json.load(open(f))["results"]:
        times[r["command"]] += r["times"]
med = {name: statistics.median(t) * 1000 for name, t in times.items()}
bw = med["bwrap --unshare-all"]
print(f"{'command':40} {'median ms':>10} {'vs bwrap':>9}   ({len(times[next(iter(times))])} runs each, {len(glob.glob(sys.argv[1] + '/result-*.json'))} alternating rounds)")
for name, m in med.items():
    print(f"{name:40} {m:10.2f} {m / bw:8.2f}x")
full = med["sluice run (full, receipt committed)"]
print(f"\ntarget: sluice <= 1.8x bwrap -> {'MET' if full <= 1.8 * bw else 'NOT MET'} ({full / bw:.2f}x)")
result("startup.sluice_ms", full)
result("startup.bwrap_ms", bw)
if "sluice run (baseline binary)" in med:
    base = med["sluice run (baseline binary)"]
    print(f"this build vs the baseline binary: {full:.2f} ms vs {base:.2f} ms ({full - base:+.2f} ms)")
runs = 20
for who, cmd in (("sluice", sys.argv[3]), ("bwrap", sys.argv[4])):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    for _ in range(runs):
        subprocess.run(shlex.split(cmd), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    faults = (after.ru_minflt - before.ru_minflt) / runs
    cpu = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) / runs * 1000
    print(f"{who:7} per start: {faults:6.0f} page faults, {cpu:6.2f} ms of CPU (user + system)")
    result(f"startup.{who}_faults", faults)
    result(f"startup.{who}_cpu_ms", cpu)
phases = collections.OrderedDict()
for line in open(sys.argv[2]):
    if line.startswith("timing: "):
        name, ms = line[8:].rsplit(None, 2)[0].strip(), float(line.split()[-2])
        phases.setdefault(name, []).append(ms)
print(f"\nwhere sluice's time goes (median of {os.environ.get('TIMING_RUNS', 50)} runs, SLUICE_TIMING=1). Not shown: exec and")
print("start-up before the first phase (~0.5 ms) and exit after the last (~0.2 ms). Lines marked")
print("(during clone) and (before teardown) overlap the runner phase they sit in:")
for name, v in phases.items():
    print(f"  {name:54} {statistics.median(v):7.3f} ms")
PY
