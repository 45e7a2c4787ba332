#!/usr/bin/env bash
# sluice proxy vs Squid, side by side in one run, everything on loopback:
#   1. plain-HTTP keep-alive requests/s and p50/p99 latency with wrk (absolute-form requests)
#      through Squid (1 worker, no cache) and `sluice proxy --threads 1`, plus direct and the bare
#      HTTP relay (bench/http_relay.cpp, the floor of a one-thread proxy);
#   2. CONNECT bulk download of a 100 MiB file through each vs direct (curl -p);
#   3. RSS with 10,000 idle CONNECT tunnels open through each.
# nginx (one worker) is the upstream. sluice writes its audit store (a connections row per
# tunnel, forwards and requests rows per plain-HTTP request) unless --no-audit is given.
# Only processes this script started are stopped, by pid.
#
# Usage: bench/proxy_vs_squid.sh [--no-audit] [path/to/sluice] [path/to/splice_relay]
#        [path/to/http_relay]
#        (defaults: build/cli/sluice, build/bench/splice_relay: the bare splice(2) relay the
#        bulk download also runs through, as the floor of any relaying proxy; http_relay beside
#        it: the bare single-threaded byte relay the keep-alive rounds also run through, as the
#        floor of a one-thread plain-HTTP proxy; each left out if absent)
# Env:   DURATION (wrk seconds, default 10), CONNS (wrk connections, default 50),
#        TUNNELS (idle tunnels, default 10000; 0 skips them), RUNS (download repetitions, default 9),
#        ROUNDS (alternating wrk rounds, default 3)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
bench_args "$@"
set -- "${ARGS[@]}"

SLUICE=${1:-${SLUICE:-build/cli/sluice}}
RELAY=${2:-${RELAY:-build/bench/splice_relay}}
HTTP_RELAY=${3:-${HTTP_RELAY:-$(dirname "$RELAY")/http_relay}}
DURATION=${DURATION:-10}
CONNS=${CONNS:-50}
TUNNELS=${TUNNELS:-10000}
RUNS=${RUNS:-9}
ROUNDS=${ROUNDS:-3}

if [[ ! -x $SLUICE ]]; then
  echo "sluice binary not found at $SLUICE (build it, or pass its path)" >&2
  exit 2
fi
SLUICE=$(readlink -f "$SLUICE")

need nginx nginx-light
need squid squid-openssl  # the OpenSSL flavour: tls_vs_passthrough.sh bumps with it
need wrk wrk
need curl curl
need python3 python3
need pgrep procps
if [[ ! -x /usr/bin/time ]]; then  # GNU time, for the load generator's CPU (bash's is a keyword)
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q time >/dev/null
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
SQUID=$(command -v squid || echo /usr/sbin/squid)

# 10,000 tunnels = 20,000+ descriptors in each proxy. Raise the soft limit to the hard one;
# where the hard limit is lower (containers without CAP_SYS_RESOURCE), open as many tunnels as
# it allows and say so.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
max_tunnels=$(( ($(ulimit -n) - 200) / 2 ))
if (( TUNNELS > max_tunnels )); then
  echo "note: descriptor limit $(ulimit -n) allows $max_tunnels tunnels per proxy, not $TUNNELS" >&2
  TUNNELS=$max_tunnels
fi

bench_init sluice-bench

NGINX_PORT=$(free_port)
SQUID_PORT=$(free_port)
SLUICE_PORT=$(free_port)
RELAY_PORT=$(free_port)
HTTP_RELAY_PORT=$(free_port)

# ---- upstream: nginx, one worker -------------------------------------------------------
# nginx workers run unprivileged: they must be able to read the files.
chmod 755 "$TMP"
mkdir -p "$TMP/www" "$TMP/nginx"
printf 'hello from nginx\n' > "$TMP/www/small"
head -c $((100 * 1024 * 1024)) /dev/zero > "$TMP/www/100m"
chmod -R a+rX "$TMP/www"
cat > "$TMP/nginx/nginx.conf" <<EOF
daemon off;
worker_processes 1;
worker_rlimit_nofile 65536;
pid $TMP/nginx/nginx.pid;
error_log $TMP/nginx/error.log;
events { worker_connections 30000; }
http {
  access_log off;
  sendfile on;
  keepalive_requests 1000000;
  keepalive_timeout 300s;
  client_body_temp_path $TMP/nginx;
  proxy_temp_path $TMP/nginx;
  fastcgi_temp_path $TMP/nginx;
  uwsgi_temp_path $TMP/nginx;
  scgi_temp_path $TMP/nginx;
  server {
    listen 127.0.0.1:$NGINX_PORT backlog=16384;
    root $TMP/www;
  }
}
EOF
"$NGINX" -p "$TMP/nginx" -c "$TMP/nginx/nginx.conf" &
PIDS+=($!)

# ---- Squid: one worker, no cache, no access log ----------------------------------------
mkdir -p "$TMP/squid"
chown -R proxy:proxy "$TMP/squid" 2>/dev/null || true
cat > "$TMP/squid/squid.conf" <<EOF
http_port 127.0.0.1:$SQUID_PORT
EOF
squid_common_conf >> "$TMP/squid/squid.conf"
"$SQUID" -N -f "$TMP/squid/squid.conf" 2> "$TMP/squid/stderr.log" &
PIDS+=($!)
SQUID_PID=$!

# ---- sluice proxy, one thread ------------------------------------------------------------
mkdir -p "$TMP/policies"
cat > "$TMP/policies/bench.yaml" <<EOF
apiVersion: sluice/v1
kind: Workflow
name: bench
egress:
  rules:
    - id: nginx
      action: allow
      cidrs: ["127.0.0.1/32"]
      allow_private: true
      ports: [$NGINX_PORT]
  limits:
    max_connections: 100000
    max_requests: 1000000000
    max_bytes_out: 1TiB
    max_bytes_in: 1TiB
EOF
audit_args=()
[[ $AUDIT == 1 ]] && audit_args=(--audit "$TMP/audit.db")
"$SLUICE" proxy --policy-dir "$TMP/policies" --listen "127.0.0.1:$SLUICE_PORT" \
  --workflow bench --threads 1 "${audit_args[@]}" 2> "$TMP/sluice.log" &
PIDS+=($!)
SLUICE_PID=$!

wait_port "$NGINX_PORT"
NGINX_WORKER=$(pgrep -P "${PIDS[0]}" | head -1)
wait_port "$SQUID_PORT"
wait_port "$SLUICE_PORT"
# start_relay BINARY PORT ROW: a bare relay to nginx in the background, its pid in RELAY_STARTED
# (empty, with a note, when it is not built).
start_relay() {
  RELAY_STARTED=""
  if [[ ! -x $1 ]]; then
    echo "($1 not built: the bare-relay floor of the $3 row is left out)"
    return
  fi
  "$1" "$2" "$NGINX_PORT" > /dev/null &
  PIDS+=($!)
  RELAY_STARTED=$!
  wait_port "$2"
}
PEERS=(direct squid sluice)
start_relay "$RELAY" "$RELAY_PORT" download
RELAY_PID=$RELAY_STARTED
if [[ -n $RELAY_PID ]]; then PEERS+=(relay); fi
HTTP_PEERS=(direct squid sluice)
start_relay "$HTTP_RELAY" "$HTTP_RELAY_PORT" keep-alive
HTTP_RELAY_PID=$RELAY_STARTED
if [[ -n $HTTP_RELAY_PID ]]; then HTTP_PEERS+=(relay); fi

# ---- 1. plain HTTP keep-alive with wrk ---------------------------------------------------
cat > "$TMP/absolute.lua" <<EOF
-- absolute-form requests, as a client configured with HTTP_PROXY sends them
wrk.path = "http://127.0.0.1:$NGINX_PORT/small"
wrk.headers["Host"] = "127.0.0.1:$NGINX_PORT"
EOF
to_ms() {  # wrk latency "123.45us" / "1.20ms" / "1.01s" -> ms
  awk '{v=$1; if (v ~ /us$/) {sub(/us$/,"",v); print v/1000} else if (v ~ /ms$/) {sub(/ms$/,"",v); print v} else if (v ~ /s$/) {sub(/s$/,"",v); print v*1000} else print v}'
}
run_wrk() {  # run_wrk NAME URL [lua] [pid]: req/s, latency, and proxy CPU per request
  local name=$1 url=$2 script=${3:-} pid=${4:-}
  local out t0=0 t1=0 n0 n1
  [[ -n $pid ]] && t0=$(cpu_ticks "$pid")
  n0=$(cpu_ticks "$NGINX_WORKER")
  local m0 m1 w0 w1  # the whole machine's busy ticks (softirq included), every CPU; wall ns
  m0=$(machine_ticks)
  w0=$(date +%s%N)
  out=$(/usr/bin/time -f '%U %S' -o "$TMP/wrk.time" \
    wrk -t1 -c"$CONNS" -d"${DURATION}s" --latency ${script:+-s "$script"} "$url")
  n1=$(cpu_ticks "$NGINX_WORKER")
  m1=$(machine_ticks)
  w1=$(date +%s%N)
  [[ -n $pid ]] && t1=$(cpu_ticks "$pid")
  local rps p50 p99 errs total cpu="-"
  rps=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
  p50=$(awk '$1 == "50%" {print $2}' <<<"$out" | to_ms)
  p99=$(awk '$1 == "99%" {print $2}' <<<"$out" | to_ms)
  errs=$(awk '/Non-2xx or 3xx responses:/ {print $NF}' <<<"$out")
  total=$(awk '/requests in/ {print $1}' <<<"$out")
  if [[ -n $pid ]]; then
    cpu=$(awk -v d=$((t1 - t0)) -v hz="$(getconf CLK_TCK)" -v n="$total" 'BEGIN {printf "%.1f", d / hz * 1e6 / n}')
  fi
  local others
  others=$(awk -v w="$(cat "$TMP/wrk.time")" -v d=$((n1 - n0)) -v hz="$(getconf CLK_TCK)" -v n="$total" \
    -v m=$((m1 - m0)) -v cpus="$(nproc)" -v secs="$(( (w1 - w0) / 1000000 ))e-3" \
    'BEGIN {split(w, a, " "); printf "wrk %.1f + nginx %.1f, machine %.1f (%.0f%% busy)", (a[1] + a[2]) * 1e6 / n, d / hz * 1e6 / n, m / hz * 1e6 / n, 100 * m / hz / (cpus * secs)}')
  printf '  %-8s %12s req/s   p50 %8s ms   p99 %8s ms   CPU us/req: proxy %5s, %s   non-2xx %s\n' \
    "$name" "$rps" "$p50" "$p99" "$cpu" "$others" "${errs:-0}"
  echo "$rps $p99 $cpu $p50" >> "$TMP/wrk.$name"
}
summary() {  # summary NAME: medians over the rounds
  local f="$TMP/wrk.$1"
  local rps p99 cpu p50
  rps=$(awk '{print $1}' "$f" | median)
  p50=$(awk '{print $4}' "$f" | median)
  p99=$(awk '{print $2}' "$f" | median)
  cpu=$(awk '{print $3}' "$f" | median 2>/dev/null || echo "-")
  printf '%-8s %12.0f req/s   p50 %7.3f ms   p99 %7.3f ms   proxy CPU %6s us/req   (median of %d)\n' \
    "$1" "$rps" "$p50" "$p99" "$cpu" "$(wc -l < "$f")"
  eval "RPS_$1=$rps P99_$1=$p99 CPU_$1=$cpu P50_$1=$p50"
  result "http.$1.rps" "$rps"
  result "http.$1.p50_ms" "$p50"
  result "http.$1.p99_ms" "$p99"
}
echo "== plain HTTP keep-alive: wrk -t1 -c$CONNS -d${DURATION}s, 17-byte body, $ROUNDS rounds;" \
     "sluice audit $( [[ $AUDIT == 1 ]] && echo on || echo off ) =="
# Rounds alternate the targets so a burst of load from elsewhere on the machine hits
# all of them alike; medians are compared.
for round in $(seq "$ROUNDS"); do
  echo "round $round"
  run_wrk direct "http://127.0.0.1:$NGINX_PORT/small"
  run_wrk squid "http://127.0.0.1:$SQUID_PORT/" "$TMP/absolute.lua" "$SQUID_PID"
  run_wrk sluice "http://127.0.0.1:$SLUICE_PORT/" "$TMP/absolute.lua" "$SLUICE_PID"
  if [[ -n ${HTTP_RELAY_PID:-} ]]; then
    run_wrk relay "http://127.0.0.1:$HTTP_RELAY_PORT/" "$TMP/absolute.lua" "$HTTP_RELAY_PID"
  fi
done
for who in "${HTTP_PEERS[@]}"; do summary "$who"; done
awk -v a="$RPS_sluice" -v b="$RPS_squid" -v p="$P99_sluice" -v q="$P99_squid" \
  -v c="$CPU_sluice" -v d="$CPU_squid" -v r="${RPS_relay:-0}" -v rc="${CPU_relay:-0}" \
  'BEGIN {printf "sluice/squid requests/s: %.2fx   p99 sluice %.3f ms vs squid %.3f ms   CPU per request: squid/sluice %.2fx\n", a/b, p, q, d/c
          if (r > 0) printf "bare HTTP relay/squid requests/s: %.2fx   sluice/bare HTTP relay: %.2fx   relay CPU %.1f us/req\n", r/b, a/r, rc}'

# ---- 2. CONNECT bulk download ------------------------------------------------------------
echo
echo "== CONNECT download of 100 MiB (median of $RUNS, the peers taking turns; curl -p) =="
# Bulk throughput: bytes over the time from the first body byte to the last, so the
# CONNECT round trip and the upstream dial (a few ms against ~50 ms of transfer) do not count.
# direct, squid, sluice and the bare relay take turns, so a drift of the machine's speed (2 shared cores) hits
# all alike. Beside it, the CPU each process spent per 100 MiB (utime + stime, so the
# kernel's TCP work in each one's syscalls and the softirqs they ran is counted): it shows
# what a relaying proxy adds and who waits for whom. "relay" is bench/splice_relay.cpp: a
# CONNECT relay with nothing but blocking splice(2), one thread per direction, no policy and
# no audit: what it loses against direct is the extra loopback TCP hop itself.
download() {  # download [proxy-port] -> "bytes/s curl-cpu-ms"
  local args=()
  [[ -n ${1:-} ]] && args=(-p -x "http://127.0.0.1:$1")
  /usr/bin/time -f '%U %S' -o "$TMP/curl.time" \
    curl -s "${args[@]}" -o /dev/null -w '%{size_download} %{time_starttransfer} %{time_total}\n' \
    "http://127.0.0.1:$NGINX_PORT/100m" > "$TMP/curl.out"
  awk 'NR == FNR {b = $1 / ($3 - $2); next} {printf "%.0f %.1f\n", b, ($1 + $2) * 1000}' \
    "$TMP/curl.out" "$TMP/curl.time"
}
HZ=$(getconf CLK_TCK)
declare -A DL_SPEEDS DL_CURL DL_NGINX DL_PROXY
for _ in $(seq "$RUNS"); do
  for who in "${PEERS[@]}"; do
    port="" pid=""
    [[ $who == squid ]] && port=$SQUID_PORT pid=$SQUID_PID
    [[ $who == sluice ]] && port=$SLUICE_PORT pid=$SLUICE_PID
    [[ $who == relay ]] && port=$RELAY_PORT pid=$RELAY_PID
    n0=$(cpu_ticks "$NGINX_WORKER") p0=0
    [[ -n $pid ]] && p0=$(cpu_ticks "$pid")
    read -r speed curl_ms < <(download "$port")
    n1=$(cpu_ticks "$NGINX_WORKER") p1=0
    [[ -n $pid ]] && p1=$(cpu_ticks "$pid")
    DL_SPEEDS[$who]+="$speed "
    DL_CURL[$who]+="$curl_ms "
    DL_NGINX[$who]+="$(( (n1 - n0) * 1000 / HZ )) "
    DL_PROXY[$who]+="$(( (p1 - p0) * 1000 / HZ )) "
  done
done
sum_ms() { tr ' ' '\n' | awk 'NF {s += $1} END {printf "%.0f", s / NR}'; }  # mean of a list
printf '%-8s %12s   %s\n' "" "MiB/s" "CPU ms per 100 MiB (mean): curl / nginx / proxy"
for who in "${PEERS[@]}"; do
  speed=$(tr ' ' '\n' <<< "${DL_SPEEDS[$who]}" | awk NF | median)
  printf '%-8s %12.1f   %s / %s / %s\n' "$who" "$(awk -v s="$speed" 'BEGIN {print s/1048576}')" \
    "$(sum_ms <<< "${DL_CURL[$who]}")" "$(sum_ms <<< "${DL_NGINX[$who]}")" \
    "$(sum_ms <<< "${DL_PROXY[$who]}")"
  eval "DL_$who=$speed"
  result "connect.$who.bytes_per_s" "$speed"
  result "connect.$who.proxy_cpu_ms" "$(sum_ms <<< "${DL_PROXY[$who]}")"
done
awk -v a="$DL_sluice" -v d="$DL_direct" -v s="$DL_squid" -v r="${DL_relay:-0}" \
  'BEGIN {printf "sluice/direct throughput: %.2fx   squid/direct: %.2fx", a/d, s/d
          if (r > 0) printf "   bare relay/direct: %.2fx   sluice/bare relay: %.2fx", r/d, a/r
          printf "\n"}'

# ---- 3. idle tunnels ---------------------------------------------------------------------
if (( TUNNELS == 0 )); then exit 0; fi
echo
echo "== RSS with $TUNNELS idle CONNECT tunnels =="
cat > "$TMP/tunnels.py" <<'EOF'
# Opens N CONNECT tunnels through a proxy, checks each got 200, prints "ready", then holds
# them open until stdin closes.
import socket, sys
proxy_port, target, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
socks = []
req = ("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode()
for i in range(n):
    s = socket.create_connection(("127.0.0.1", proxy_port), timeout=10)
    s.sendall(req)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    if b" 200 " not in data.split(b"\r\n", 1)[0]:
        print("tunnel %d refused: %r" % (i, data[:200]), flush=True)
        sys.exit(1)
    socks.append(s)
print("ready", flush=True)
sys.stdin.read()
EOF
idle_rss() {  # idle_rss NAME PID PORT
  local name=$1 pid=$2 port=$3 before after
  before=$(rss_kb "$pid")
  coproc HOLDER { python3 "$TMP/tunnels.py" "$port" "127.0.0.1:$NGINX_PORT" "$TUNNELS"; }
  local line=""
  read -r -t 120 line <&"${HOLDER[0]}" || true
  if [[ $line != ready ]]; then
    echo "$name: tunnels not established: $line" >&2
    exec {HOLDER[1]}>&- || true
    wait "$HOLDER_PID" 2>/dev/null || true
    return
  fi
  sleep 1
  after=$(rss_kb "$pid")
  exec {HOLDER[1]}>&-
  wait "$HOLDER_PID" 2>/dev/null || true
  awk -v n="$name" -v b="$before" -v a="$after" -v t="$TUNNELS" \
    'BEGIN {printf "%-8s RSS %7.1f MiB -> %7.1f MiB   %6.2f KiB per idle tunnel\n", n, b/1024, a/1024, (a-b)/t}'
  sleep 2  # let the proxy close its side before the next run
}
idle_rss sluice "$SLUICE_PID" "$SLUICE_PORT"
# Squid's main worker process is the child of the -N master when workers=1; the -N process
# itself serves when there is a single worker.
idle_rss squid "$SQUID_PID" "$SQUID_PORT"
