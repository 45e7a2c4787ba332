#!/usr/bin/env bash
# The added latency of an approved request: inside one `sluice run`, a Python client
# sends N fresh-connection GETs through the proxy (HTTP_PROXY) to an upstream on an allow rule
# (port 8080) and N to the same upstream on an ask rule (port 8081) answered at once by
# `--approve-with 'echo allow'`, alternating; medians and p99 of each, and the difference.
# Then, when built (bench/approval_bench), the same comparison with the approval answered by an
# in-process desk watcher (no command spawned): the cost of the desk itself.
# The upstream is python's http.server in a namespace this script makes (10.235.0.2, over a
# veth pair). The run records to an audit store unless --no-audit is given. Needs root.
# Usage: bench/approval_latency.sh [--no-audit] [BUILD_DIR]   (env: N=300)
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/lib.sh"
bench_args "$@"
set -- "${ARGS[@]}"
BUILD_DIR="${1:-build}"
SLUICE="$(realpath "${SLUICE:-$BUILD_DIR/cli/sluice}")"
N="${N:-300}"
bench_init sluice-bench-approval
NS="sluice-bench-ap-$$"
veth_upstream "$NS" "abh$$" "abn$$" 10.235.0
echo ok > "$TMP/index.html"
for port in 8080 8081; do
  (cd "$TMP" && exec ip netns exec "$NS" /usr/bin/python3 -m http.server "$port" \
    --bind 10.235.0.2 >/dev/null 2>&1) &
  PIDS+=($!)
done
for port in 8080 8081; do
  for _ in $(seq 100); do
    curl -s --max-time 1 "http://10.235.0.2:$port/" >/dev/null && break; sleep 0.05
  done
done
cat > "$TMP/policy.yaml" <<'YAML'
apiVersion: sluice/v1
kind: Workflow
name: bench-approval
sandbox:
  timeout: 300s
  network: proxy
egress:
  limits: {max_connections: 64, max_requests: 100000}
  rules:
    - {id: open, action: allow, cidrs: ["10.235.0.2/32"], allow_private: true, ports: [8080]}
    - {id: gate, action: ask, cidrs: ["10.235.0.2/32"], allow_private: true, ports: [8081],
       ask: {timeout: 10s}}
YAML
cat > "$TMP/client.py" <<'PY'
import http.client, json, statistics, sys, time
n = int(sys.argv[1])
def get(port):
    t = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", 3128, timeout=15)
    c.request("GET", "http://10.235.0.2:%d/index.html" % port)
    r = c.getresponse(); r.read(); c.close()
    assert r.status == 200, (port, r.status, r.getheader("X-Sluice-Reason"))
    return (time.perf_counter() - t) * 1000
for _ in range(10):
    get(8080); get(8081)
xs = {8080: [], 8081: []}
for _ in range(n):
    for p in (8080, 8081):
        xs[p].append(get(p))
res = {}
for p, name in ((8080, "allow"), (8081, "ask")):
    v = sorted(xs[p])
    res[name] = {"p50": round(statistics.median(v), 3), "p99": round(v[int(len(v) * 0.99) - 1], 3)}
print(json.dumps(res))
PY
AUDIT_DB="$TMP/audit.db"
[[ $AUDIT == 1 ]] || AUDIT_DB=""
OUT=$("$SLUICE" run --policy "$TMP/policy.yaml" --audit "$AUDIT_DB" --approve-with 'echo allow' \
  --input "$TMP/client.py:client.py" --json -- /usr/bin/python3 /input/client.py "$N" 2>/dev/null)
python3 - "$OUT" "$N" <<'PY'
import json, sys
rec = json.loads(sys.argv[1])
try:
    r = json.loads(rec["stdout"]["text"])
except ValueError:
    sys.exit("the client failed: " + rec["stdout"]["text"] + rec["stderr"]["text"])
a, k = r["allow"], r["ask"]
print(f"sluice run, {sys.argv[2]} fresh-connection GETs each through HTTP_PROXY, alternating:")
print(f"  allow rule                                p50 {a['p50']:.3f} ms  p99 {a['p99']:.3f} ms")
print(f"  ask rule, --approve-with 'echo allow'     p50 {k['p50']:.3f} ms  p99 {k['p99']:.3f} ms"
      f"  (+{k['p50'] - a['p50']:.3f} ms at the median)")
PY
if [[ -x "$BUILD_DIR/bench/approval_bench" ]]; then
  "$BUILD_DIR/bench/approval_bench" "$N" 2>/dev/null
else
  echo "(build bench/approval_bench for the in-process desk watcher figures)"
fi
