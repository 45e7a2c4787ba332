#!/usr/bin/env bash
# `sluice serve` under unauthenticated load (DESIGN.md "Numbers to beat": RSS < 100 MiB, callers
# still served): CONNECTIONS TCP connections from 127.0.0.1, none with a token, each announcing a
# 64 MiB body and pushing up to PUSH_MIB of it, all held open; meanwhile a caller with a token
# (from 127.0.0.2, another peer) and one on the Unix socket are timed. Reports the daemon's VmRSS
# before and after and its VmHWM (/proc/PID/status), the body bytes the sockets accepted, and the
# callers' answers. The client is python3 (standard library).
# `sluice serve` always records (no mode without its audit store): --no-audit changes nothing.
# Usage: bench/serve_abuse.sh [--no-audit] [BUILD_DIR]
# Env: CONNECTIONS (default 200), PUSH_MIB (default 1), SLUICE (the binary; default
#      BUILD_DIR/cli/sluice), BASELINE_SLUICE (another build, e.g. an older commit's, measured
#      the same way first; its token file drops the `metrics` mark it may not know).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/lib.sh"
bench_args "$@"
set -- "${ARGS[@]}"
BUILD_DIR="${1:-build}"
SLUICE="$(realpath "${SLUICE:-$BUILD_DIR/cli/sluice}")"
CONNECTIONS="${CONNECTIONS:-200}"
PUSH_MIB="${PUSH_MIB:-1}"
[ "$(id -u)" = 0 ] || { echo "serve_abuse: needs root (sluice serve builds sandboxes)" >&2; exit 1; }
bench_init sluice-bench-abuse
mkdir -p "$TMP/policies"
cat > "$TMP/policies/shell.yaml" <<'YAML'
apiVersion: sluice/v1
kind: Workflow
name: shell
sandbox: {timeout: 30s, network: none}
YAML
TOKEN=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
SCRAPER=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
printf 'agent %s\nscraper %s metrics\n' "$TOKEN" "$SCRAPER" > "$TMP/tokens"
sed 's/ metrics$//' "$TMP/tokens" > "$TMP/tokens.plain"
chmod 600 "$TMP/tokens" "$TMP/tokens.plain"

kib() { awk -v f="$2:" '$1 == f {print $2}' "/proc/$1/status"; }

# measure LABEL BINARY TOKENFILE
measure() {
  local label="$1" bin="$2" tokens="$3" port pid
  port=$(free_port)
  rm -f "$TMP/sock" "$TMP/audit.db"*
  "$bin" serve --policy-dir "$TMP/policies" --listen "unix:$TMP/sock" --listen "127.0.0.1:$port" \
    --token-file "$tokens" --audit "$TMP/audit.db" --drain 1s >"$TMP/$label.log" 2>&1 &
  pid=$!
  PIDS+=("$pid")
  wait_port "$port"
  local rss_before
  rss_before=$(kib "$pid" VmRSS)
  python3 - "$port" "$CONNECTIONS" "$PUSH_MIB" "$TOKEN" "$TMP/sock" "$pid" "$label" "$rss_before" <<'PY'
import errno, select, socket, sys, time
port, n, push_mib, token, sock, pid, label, rss_before = sys.argv[1:]
port, n, push, pid = int(port), int(n), int(push_mib) << 20, int(pid)
def status(field):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) // 1024
head = (b"POST /v1/runs HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\n"
        b"Content-Length: 67108864\r\n\r\n")
conns = []
for _ in range(n):
    s = socket.create_connection(("127.0.0.1", port), source_address=("127.0.0.1", 0))
    s.sendall(head)
    s.setblocking(False)
    conns.append(s)
pushed = [0] * n
live = set(range(n))
chunk = b"x" * 65536
last = time.monotonic()
while live and time.monotonic() - last < 2:
    _, writable, _ = select.select([], [conns[i] for i in live], [], 0.2)
    for s in writable:
        i = conns.index(s)
        try:
            k = s.send(chunk[: min(len(chunk), push - pushed[i])])
            pushed[i] += k
            last = time.monotonic()
        except OSError:
            live.discard(i)  # the daemon closed it
        if pushed[i] >= push:
            live.discard(i)
def call(family, addr, source, auth):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(10)
    if source: s.bind(source)
    t = time.monotonic()
    s.connect(addr)
    s.sendall(b"GET /v1/healthz HTTP/1.1\r\nHost: sluice\r\nConnection: close\r\n" + auth + b"\r\n")
    out = b""
    while True:
        d = s.recv(65536)
        if not d: break
        out += d
    s.close()
    return out.split(b"\r\n", 1)[0].decode(), (time.monotonic() - t) * 1000
tcp = call(socket.AF_INET, ("127.0.0.1", port), ("127.0.0.2", 0),
           b"Authorization: Bearer " + token.encode() + b"\r\n")
unix = call(socket.AF_UNIX, sock, None, b"")
print(f"{label}: {n} unauthenticated connections x 64 MiB announced, {sum(pushed) >> 20} MiB of "
      f"body accepted by the sockets (of {n * push >> 20} MiB pushed at them)")
print(f"{label}: daemon VmRSS {int(rss_before) // 1024} MiB before -> {status('VmRSS')} MiB, "
      f"VmHWM {status('VmHWM')} MiB")
print(f"{label}: token caller from 127.0.0.2: {tcp[0]} in {tcp[1]:.1f} ms; "
      f"Unix caller: {unix[0]} in {unix[1]:.1f} ms")
for s in conns: s.close()
PY
  kill "$pid"
  wait "$pid" 2>/dev/null || true
}

if [ -n "${BASELINE_SLUICE:-}" ]; then
  measure baseline "$(realpath "$BASELINE_SLUICE")" "$TMP/tokens.plain"
fi
measure sluice "$SLUICE" "$TMP/tokens"
