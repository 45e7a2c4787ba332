#!/usr/bin/env bash
# Transparent capture vs explicit proxy, and sluice's DNS, measured from inside one `sluice run`
# (same sandbox, same run): a Python client makes N fresh connections + one HTTP GET each to an
# upstream in a namespace this script makes (10.232.0.2:8080, reached over a veth pair) through
# HTTP_PROXY (explicit) and directly (redirected by the sandbox's nftables rule: transparent),
# then N getaddrinfo() calls of an allowed name (sluice's DNS, synthetic answer).
# The run records to an audit store unless --no-audit is given. Needs root.
# Usage: bench/transparent_latency.sh [--no-audit] [BUILD_DIR]   (env: N=300)
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/lib.sh"
bench_args "$@"
set -- "${ARGS[@]}"
BUILD_DIR="${1:-build}"
SLUICE="$(realpath "${SLUICE:-$BUILD_DIR/cli/sluice}")"
N="${N:-300}"
bench_init sluice-bench-transparent
NS="sluice-bench-tp-$$"
veth_upstream "$NS" "tbh$$" "tbn$$" 10.232.0
echo ok > "$TMP/index.html"
(cd "$TMP" && exec ip netns exec "$NS" /usr/bin/python3 -m http.server 8080 --bind 10.232.0.2 \
  >/dev/null 2>&1) &
PIDS+=($!)
for _ in $(seq 100); do curl -s --max-time 1 http://10.232.0.2:8080/ >/dev/null && break; sleep 0.05; done
cat > "$TMP/policy.yaml" <<'YAML'
apiVersion: sluice/v1
kind: Workflow
name: bench-transparent
sandbox:
  timeout: 120s
  network: proxy
egress:
  limits: {max_connections: 64, max_requests: 100000, max_dns_queries: 100000}
  rules:
    - {id: upstream, action: allow, cidrs: ["10.232.0.2/32"], allow_private: true, ports: [8080]}
    - {id: named, action: allow, hosts: ["api.bench.test"], ports: [443]}
YAML
cat > "$TMP/client.py" <<'PY'
import http.client, json, os, socket, statistics, sys, time
n = int(sys.argv[1])
def get(proxy):
    t = time.perf_counter()
    if proxy:
        c = http.client.HTTPConnection("127.0.0.1", 3128, timeout=10)
        c.request("GET", "http://10.232.0.2:8080/index.html")
    else:
        c = http.client.HTTPConnection("10.232.0.2", 8080, timeout=10)
        c.request("GET", "/index.html")
    r = c.getresponse(); r.read(); c.close()
    assert r.status == 200, r.status
    return (time.perf_counter() - t) * 1000
def dns():
    t = time.perf_counter()
    socket.getaddrinfo("api.bench.test", 443, socket.AF_INET, socket.SOCK_STREAM)
    return (time.perf_counter() - t) * 1000
res = {}
for name, f in (("explicit", lambda: get(True)), ("transparent", lambda: get(False)), ("dns", dns)):
    for _ in range(10): f()
    xs = sorted(f() for _ in range(n))
    res[name] = {"p50": round(statistics.median(xs), 3), "p99": round(xs[int(len(xs)*0.99)-1], 3)}
print(json.dumps(res))
PY
AUDIT_DB="$TMP/audit.db"
[[ $AUDIT == 1 ]] || AUDIT_DB=""
OUT=$("$SLUICE" run --policy "$TMP/policy.yaml" --audit "$AUDIT_DB" --input "$TMP/client.py:client.py" --json \
  -- /usr/bin/python3 /input/client.py "$N")
python3 - "$OUT" <<'PY'
import json, sys
r = json.loads(json.loads(sys.argv[1])["stdout"]["text"])
e, t, d = r["explicit"], r["transparent"], r["dns"]
print(f"explicit proxy (HTTP_PROXY), connect + GET   p50 {e['p50']:.3f} ms  p99 {e['p99']:.3f} ms")
print(f"transparent (redirected), connect + GET      p50 {t['p50']:.3f} ms  p99 {t['p99']:.3f} ms"
      f"  = {t['p50']/e['p50']:.2f}x explicit")
print(f"sluice DNS getaddrinfo (synthetic A)         p50 {d['p50']:.3f} ms  p99 {d['p99']:.3f} ms")
PY
