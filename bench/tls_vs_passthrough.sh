#!/usr/bin/env bash
# What TLS inspection costs: HTTPS requests/s and p50/p99 latency through `sluice proxy` with
# `tls: inspect` (+ header injection + a requests audit row each) against a passthrough CONNECT
# tunnel to the same loopback HTTPS upstream (nginx, one worker), through Squid with ssl-bump
# (one worker, squid-openssl; new and reuse only: Squid does not speak h2 to clients) and
# directly, side by side in one run, with
#   new:   a new client connection per request (CONNECT + full TLS handshake, no resumption);
#   reuse: one kept-alive HTTP/1.1 connection per client thread;
#   h2:    one HTTP/2 connection per client thread with STREAMS requests in flight (through
#          inspection the proxy speaks h2 to both sides: docs/tls.md, "HTTP/2").
# The load client is bench/tls_load.cpp (OpenSSL, N threads). Only processes this script
# started are stopped, by pid.
# Around every measured run the script also reads each process's CPU (/proc/PID/stat; the
# client reports its own) and the whole machine's (/proc/stat, softirq included), and prints
# the CPU microseconds per request of each and the ceiling that total puts on requests/s with
# this machine's cores (docs/benchmarks.md, "TLS inspection: where the CPU goes").
#
# Beside them in the reuse mode, bench/tls_relay.cpp: a bare TLS-terminating relay (decrypt and
# re-encrypt, nothing else: no policy, parsing, injection or audit), the floor of inspection the
# way bench/splice_relay.cpp is the CONNECT download's.
#
# Usage: bench/tls_vs_passthrough.sh [--no-audit] [path/to/sluice] [path/to/tls_load] [path/to/tls_relay]
#        (defaults: build/cli/sluice, build/bench/tls_load, build/bench/tls_relay;
#        --no-audit: no audit store)
# Env:   DURATION (seconds per run, default 5), CLIENTS (client threads, default 8),
#        ROUNDS (alternating rounds, default 3), PROXY_THREADS (sluice --threads, default 1),
#        SQUID_BUMP (0 leaves the Squid ssl-bump peer out, default 1),
#        UPSTREAM_TICKETS (1: nginx issues TLS session tickets, as public APIs do, so a proxy
#        may resume its upstream sessions; tls_load itself never resumes. Default 1),
#        STREAMS (h2 requests in flight per connection, default 10), MODES (default "new reuse h2"),
#        S_TIME (0 leaves out `openssl s_time` against nginx, default 1)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
bench_args "$@"
set -- "${ARGS[@]}"

SLUICE=${1:-${SLUICE:-build/cli/sluice}}
TLS_LOAD=${2:-${TLS_LOAD:-build/bench/tls_load}}
TLS_RELAY=${3:-${TLS_RELAY:-build/bench/tls_relay}}
DURATION=${DURATION:-5}
CLIENTS=${CLIENTS:-8}
ROUNDS=${ROUNDS:-3}
PROXY_THREADS=${PROXY_THREADS:-1}
SQUID_BUMP=${SQUID_BUMP:-1}
UPSTREAM_TICKETS=${UPSTREAM_TICKETS:-1}
STREAMS=${STREAMS:-10}
S_TIME=${S_TIME:-1}
MODES=${MODES:-new reuse h2}

for b in "$SLUICE" "$TLS_LOAD"; do
  if [[ ! -x $b ]]; then
    echo "$b not found (build the sluice and tls_load targets, or pass their paths)" >&2
    exit 2
  fi
done
SLUICE=$(readlink -f "$SLUICE")
TLS_LOAD=$(readlink -f "$TLS_LOAD")

need nginx nginx-light
need openssl openssl
need python3 python3
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
SQUID_CERTGEN=/usr/lib/squid/security_file_certgen
if [[ $SQUID_BUMP == 1 && ! -x $SQUID_CERTGEN ]]; then
  # ssl-bump needs Squid built with OpenSSL (Debian's squid package is the GnuTLS flavour).
  echo "installing squid-openssl" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q squid-openssl >/dev/null
fi
SQUID=$(command -v squid || echo /usr/sbin/squid)

bench_init sluice-tlsbench

NGINX_PORT=$(free_port)
INSPECT_PORT=$(free_port)
PASS_PORT=$(free_port)
BUMP_PORT=$(free_port)
RELAY_PORT=$(free_port)
chmod 755 "$TMP"

# ---- a private upstream CA and a certificate for "localhost" ------------------------------
# "localhost" resolves (via /etc/hosts) to loopback, which the policy allows with
# allow_private + cidrs, so the proxy's SSRF guard and name resolution run as in production.
upstream_pki "tls bench upstream CA"

# ---- upstream: nginx, one worker, TLS, a 17-byte body ---------------------------------------
mkdir -p "$TMP/nginx"
cat > "$TMP/nginx/nginx.conf" <<EOF
daemon off;
worker_processes 1;
worker_rlimit_nofile 65536;
pid $TMP/nginx/nginx.pid;
error_log $TMP/nginx/error.log;
events { worker_connections 30000; }
http {
  access_log off;
  keepalive_requests 1000000;
  keepalive_timeout 300s;
  ssl_session_cache off;
  ssl_session_tickets $( [[ $UPSTREAM_TICKETS == 1 ]] && echo on || echo off );
  client_body_temp_path $TMP/nginx;
  proxy_temp_path $TMP/nginx;
  fastcgi_temp_path $TMP/nginx;
  uwsgi_temp_path $TMP/nginx;
  scgi_temp_path $TMP/nginx;
  server {
    listen 127.0.0.1:$NGINX_PORT ssl http2 backlog=16384;
    ssl_certificate $TMP/pki/server.pem;
    ssl_certificate_key $TMP/pki/server.key;
    ssl_protocols TLSv1.2 TLSv1.3;
    location / { return 200 "hello from nginx\n"; }
  }
}
EOF
"$NGINX" -p "$TMP/nginx" -c "$TMP/nginx/nginx.conf" &
PIDS+=($!)
NGINX_PID=$!

start_squid_bump() {
  mkdir -p "$TMP/squid"
  # The same key type as sluice's CA (P-256): Squid signs its leaves with the port's key.
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj "/CN=squid bench CA" -keyout "$TMP/squid/ca.key" -out "$TMP/squid/ca.pem" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign" 2>/dev/null
  "$SQUID_CERTGEN" -c -s "$TMP/squid/ssl_db" -M 16MB >/dev/null
  chown -R proxy:proxy "$TMP/squid" 2>/dev/null || true
  cat > "$TMP/squid/squid.conf" <<EOF
http_port 127.0.0.1:$BUMP_PORT ssl-bump tls-cert=$TMP/squid/ca.pem tls-key=$TMP/squid/ca.key generate-host-certificates=on dynamic_cert_mem_cache_size=16MB
sslcrtd_program $SQUID_CERTGEN -s $TMP/squid/ssl_db -M 16MB
sslcrtd_children 4 startup=1 idle=1
acl step1 at_step SslBump1
ssl_bump peek step1
ssl_bump bump all
tls_outgoing_options cafile=$TMP/pki/ca.pem
EOF
squid_common_conf >> "$TMP/squid/squid.conf"
  "$SQUID" -N -f "$TMP/squid/squid.conf" 2> "$TMP/squid/stderr.log" &
  PIDS+=($!)
  SQUID_PID=$!
}

# ---- sluice proxy: one listener inspecting, one passing through -----------------------------
"$SLUICE" ca init --dir "$TMP/ca" >/dev/null
mkdir -p "$TMP/policies"
limits='  limits:
    max_connections: 100000
    max_requests: 1000000000
    max_bytes_out: 1TiB
    max_bytes_in: 1TiB'
cat > "$TMP/policies/inspect.yaml" <<EOF
apiVersion: sluice/v1
kind: Workflow
name: inspect
egress:
  rules:
    - id: api
      action: allow
      hosts: [localhost]
      ports: [$NGINX_PORT]
      allow_private: true
      cidrs: ["127.0.0.0/8", "::1/128"]
      tls: inspect
      methods: [GET]
      paths: ["/*"]
      inject:
        headers:
          Authorization: "Bearer \${secret:bench_token}"
$limits
EOF
cat > "$TMP/policies/passthrough.yaml" <<EOF
apiVersion: sluice/v1
kind: Workflow
name: passthrough
egress:
  rules:
    - id: api
      action: allow
      hosts: [localhost]
      ports: [$NGINX_PORT]
      allow_private: true
      cidrs: ["127.0.0.0/8", "::1/128"]
$limits
EOF
(umask 077; printf 'bench_token:\n  value: "bench-secret-value-0123456789"\n' > "$TMP/secrets.yaml")
audit_args=()
[[ $AUDIT == 1 ]] && audit_args=(--audit "$TMP/audit.db")
"$SLUICE" proxy --policy-dir "$TMP/policies" \
  --listen "127.0.0.1:$INSPECT_PORT" --workflow inspect \
  --listen "127.0.0.1:$PASS_PORT" --workflow passthrough \
  --ca-dir "$TMP/ca" --upstream-ca "$TMP/pki/ca.pem" --secrets "$TMP/secrets.yaml" \
  --threads "$PROXY_THREADS" "${audit_args[@]}" 2> "$TMP/sluice.log" &
PIDS+=($!)
SLUICE_PID=$!

# ---- Squid ssl-bump: one worker, no cache, its own CA, leaves minted by security_file_certgen
WHO="direct passthrough inspect"
if [[ $SQUID_BUMP == 1 ]]; then
  start_squid_bump
  WHO+=" squid-bump"
fi

# ---- the bare TLS relay (reuse mode only: it sets connections up one at a time) -------------
RELAY_PID=
if [[ -x $TLS_RELAY && " $MODES " == *" reuse "* ]]; then
  "$TLS_RELAY" "$RELAY_PORT" "$NGINX_PORT" "$TMP/pki/server.pem" "$TMP/pki/server.key" \
    "$TMP/pki/ca.pem" > "$TMP/relay.out" 2>&1 &
  PIDS+=($!)
  RELAY_PID=$!
  WHO+=" bare-relay"
elif [[ ! -x $TLS_RELAY ]]; then
  echo "($TLS_RELAY not built: the bare-relay floor of the reuse row is left out)"
fi
# Which mode a target runs in: the bare relay only kept alive, Squid not h2.
runs() {
  if [[ $1 == squid-bump && $2 == h2 ]] || [[ $1 == bare-relay && $2 != reuse ]]; then return 1; fi
}

wait_port "$NGINX_PORT"
if [[ -n $RELAY_PID ]]; then wait_port "$RELAY_PORT"; fi
wait_port "$INSPECT_PORT"
wait_port "$PASS_PORT"
if [[ $SQUID_BUMP == 1 ]]; then wait_port "$BUMP_PORT"; fi

load() {  # load PROXY_PORT|"" MODE [DURATION] -> JSON line
  # The client trusts only what it should meet: sluice's CA through the inspecting listener,
  # the upstream's CA directly and through the passthrough tunnel.
  local ca="$TMP/pki/ca.pem"
  [[ ${1:-} == "$INSPECT_PORT" ]] && ca="$TMP/ca/ca.pem"
  [[ ${1:-} == "$BUMP_PORT" ]] && ca="$TMP/squid/ca.pem"
  local args=(--target "localhost:$NGINX_PORT" --ca "$ca"
              --mode "$2" --threads "$CLIENTS" --duration "${3:-$DURATION}" --streams "$STREAMS")
  [[ -n $1 ]] && args+=(--proxy "$1")
  "$TLS_LOAD" "${args[@]}"
}
port_of() {  # port_of WHO: the proxy port a target is reached through ("" = direct)
  case $1 in
    passthrough) echo "$PASS_PORT" ;;
    inspect) echo "$INSPECT_PORT" ;;
    squid-bump) echo "$BUMP_PORT" ;;
    bare-relay) echo "$RELAY_PORT" ;;
    *) echo "" ;;
  esac
}
field() { python3 -c "import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])" "$1" "$2"; }

# ---- sanity: every path answers, inspection really happens -------------------------------
# Through the inspecting listener the client must meet sluice's leaf, not nginx's certificate.
if "$TLS_LOAD" --target "localhost:$NGINX_PORT" --proxy "$INSPECT_PORT" --ca "$TMP/pki/ca.pem" \
     --mode reuse --threads 1 --duration 0.2 >/dev/null 2>&1; then
  echo "the inspecting listener presented the upstream's own certificate: not inspecting" >&2
  exit 1
fi
for who in $WHO; do
  p=$(port_of "$who")
  for m in $MODES; do
  runs "$who" "$m" || continue
  out=$(load "$p" "$m" 0.3) || { echo "no request succeeded via ${p:-direct}: $out" >&2; cat "$TMP/sluice.log" >&2; exit 1; }
  errs=$(field "$out" errors)
  # Squid now and then closes a kept-alive client connection under load; its client then counts
  # an error and reconnects. One in a hundred is Squid's own way, not a broken set-up; sluice's
  # paths, direct and the passthrough tunnel must have none.
  if [[ $errs != 0 && $who == squid-bump ]] && (( errs * 100 < $(field "$out" requests) )); then
    echo "note: $errs of $(field "$out" requests) requests via Squid ssl-bump failed in the check: $out" >&2
    errs=0
  fi
  if [[ $errs != 0 ]]; then
    echo "errors via $who (${p:-direct}): $out" >&2
    tail -20 "$TMP/sluice.log" >&2
    exit 1
  fi
  done
done

# ---- CPU accounting: clock ticks of each process around a measured run ----------------------
CLK_TCK=$(getconf CLK_TCK)
NCPU=$(nproc)
SQUID_PID=${SQUID_PID:-}
children() { cat /proc/"$1"/task/*/children 2>/dev/null || true; }
# The audit writer thread (its ticks are a part of the proxy's, shown on their own).
AUDIT_TASK=$(grep -lx sluice-audit /proc/"$SLUICE_PID"/task/*/comm 2>/dev/null | head -1 |
             xargs -r dirname || true)
audit_ticks() {
  if [[ -n $AUDIT_TASK ]]; then stat_cpu "$AUDIT_TASK/stat" | awk '{print $1 + $2}'; else echo 0; fi
}
CPU_PID=$SLUICE_PID  # whose CPU the proxy columns count: sluice's, or the bare relay's
cpu_sample() {  # machine proxy_user proxy_sys audit nginx squid (clock ticks so far)
  local machine nginx squid=0
  machine=$(machine_ticks)
  nginx=$(cpu_ticks "$NGINX_PID" $(children "$NGINX_PID"))
  if [[ -n $SQUID_PID ]]; then
    squid=$(cpu_ticks "$SQUID_PID" $(children "$SQUID_PID"))
  fi
  echo "$machine $(proc_cpu "$CPU_PID") $(audit_ticks) $nginx $squid"
}
# cpu_per_request BEFORE AFTER JSON: "client proxy_user proxy_sys audit nginx squid machine",
# microseconds of CPU per request (the client's from its own report).
cpu_per_request() {
  python3 - "$1" "$2" "$3" "$CLK_TCK" <<'PY'
import json, sys
b, a = [list(map(float, x.split())) for x in sys.argv[1:3]]
r = json.loads(sys.argv[3]); n = max(r["requests"], 1); us = 1e6 / float(sys.argv[4])
d = [(y - x) * us / n for x, y in zip(b, a)]
client = (r.get("cpu_user_us", 0) + r.get("cpu_sys_us", 0)) / n
print(" ".join(f"{v:.1f}" for v in [client, d[1], d[2], d[3], d[4], d[5], d[0]]))
PY
}

echo "== HTTPS GET, 17-byte body: $CLIENTS client threads (h2: $STREAMS streams each), ${DURATION}s per run, $ROUNDS rounds;" \
     "sluice --threads $PROXY_THREADS, audit $( [[ $AUDIT == 1 ]] && echo on || echo off ) =="
# Rounds alternate the targets so load from elsewhere on the machine hits all alike.
for round in $(seq "$ROUNDS"); do
  echo "round $round"
  for mode in $MODES; do
    for who in $WHO; do
      runs "$who" "$mode" || continue
      CPU_PID=$SLUICE_PID
      [[ $who == bare-relay ]] && CPU_PID=$RELAY_PID
      before=$(cpu_sample)
      out=$(load "$(port_of "$who")" "$mode" 2> "$TMP/load.err") || true
      after=$(cpu_sample)
      # A run that reported nothing (the client found no path at all: a peer restarting, say)
      # is said and left out of the medians, rather than ending the whole benchmark.
      if [[ $out != "{"* ]]; then
        printf '  %-5s %-11s failed, left out: %s\n' "$mode" "$who" \
          "$(tail -1 "$TMP/load.err" 2>/dev/null)"
        continue
      fi
      rps=$(field "$out" rps); p50=$(field "$out" p50_us); p99=$(field "$out" p99_us)
      errs=$(field "$out" errors)
      cpu=$(cpu_per_request "$before" "$after" "$out")
      printf '  %-5s %-11s %10s req/s   p50 %9s us   p99 %9s us   errors %s   CPU us/req %s\n' \
        "$mode" "$who" "$rps" "$p50" "$p99" "$errs" "$(awk '{print $7}' <<< "$cpu")"
      echo "$rps $p99 $p50" >> "$TMP/res.$mode.$who"
      echo "$cpu" >> "$TMP/cpu.$mode.$who"
    done
  done
done

echo
echo "== medians over $ROUNDS rounds =="
for mode in $MODES; do
  for who in $WHO; do
    f="$TMP/res.$mode.$who"
    [[ -f $f ]] || continue
    rps=$(awk '{print $1}' "$f" | median)
    p50=$(awk '{print $3}' "$f" | median)
    p99=$(awk '{print $2}' "$f" | median)
    printf '%-5s %-11s %10.0f req/s   p50 %9.0f us   p99 %9.0f us\n' "$mode" "$who" "$rps" "$p50" "$p99"
    eval "RPS_${mode}_${who//-/_}=$rps P99_${mode}_${who//-/_}=$p99"
    result "tls.$mode.$who.rps" "$rps"
    result "tls.$mode.$who.p50_us" "$p50"
    result "tls.$mode.$who.p99_us" "$p99"
  done
  awk -v a="$(eval echo "\$RPS_${mode}_inspect")" -v b="$(eval echo "\$RPS_${mode}_passthrough")" \
      -v p="$(eval echo "\$P99_${mode}_inspect")" -v q="$(eval echo "\$P99_${mode}_passthrough")" \
      -v m="$mode" \
      'BEGIN {printf "%-5s inspect/passthrough requests/s: %.2fx   p99 %.0f us vs %.0f us (%.2fx)\n", m, a/b, p, q, p/q}'
  if [[ $mode == reuse && -n ${RPS_reuse_bare_relay:-} ]]; then
    awk -v a="$RPS_reuse_inspect" -v b="$RPS_reuse_passthrough" -v r="$RPS_reuse_bare_relay" \
      'BEGIN {printf "reuse bare TLS relay/passthrough: %.2fx   inspect/bare TLS relay: %.2fx\n", r/b, a/r}'
  fi
  if [[ $mode != h2 && -n $(eval echo "\${RPS_${mode}_squid_bump:-}") ]]; then
    awk -v a="$(eval echo "\$RPS_${mode}_inspect")" -v b="$(eval echo "\$RPS_${mode}_squid_bump")" -v m="$mode" \
      'BEGIN {printf "%-5s inspect/squid ssl-bump requests/s: %.2fx\n", m, a/b}'
  fi
done

echo
echo "== CPU microseconds per request (medians over $ROUNDS rounds; proxy = every thread of" \
     "sluice, audit = its writer thread, a part of it; machine = all $NCPU CPUs from /proc/stat," \
     "softirq and anything else running included) =="
printf '%-5s %-11s %8s %8s %8s %8s %8s %8s %8s %9s %12s\n' mode who client nginx proxy-usr \
  proxy-sys audit squid sum machine "ceiling/s"
cpu_keys=(client proxy_user proxy_sys audit nginx squid machine)
for mode in $MODES; do
  for who in $WHO; do
    f="$TMP/cpu.$mode.$who"
    [[ -f $f ]] || continue
    med=()
    for i in 1 2 3 4 5 6 7; do med+=("$(awk -v i=$i '{print $i}' "$f" | median)"); done
    for i in "${!cpu_keys[@]}"; do
      result "tls.$mode.$who.cpu_us.${cpu_keys[$i]}" "${med[$i]}"
    done
    # ceiling: the requests/s the machine's CPUs allow at this total CPU per request.
    awk -v m="$mode" -v w="$who" -v n="$NCPU" -v c="${med[0]}" -v pu="${med[1]}" \
        -v ps="${med[2]}" -v a="${med[3]}" -v ng="${med[4]}" -v sq="${med[5]}" -v t="${med[6]}" \
      'BEGIN {printf "%-5s %-11s %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f %9.1f %12.0f\n",
              m, w, c, ng, pu, ps, a, sq, c + ng + pu + ps + sq, t, n * 1e6 / t}'
  done
done
# What the inspected proxy may spend for the goals, against the passthrough run's rate: the
# proxy serves on one thread (PROXY_THREADS=1), so its own ceiling is 1e6 / (that thread's CPU
# per request: the proxy's less its audit writer's, which runs beside it).
for mode in $MODES; do
  case $mode in reuse) goal=0.7 ;; new) goal=0.8 ;; *) continue ;; esac
  [[ -f $TMP/cpu.$mode.inspect && -n $(eval echo "\${RPS_${mode}_passthrough:-}") ]] || continue
  awk -v m="$mode" -v g="$goal" -v n="$NCPU" -v r="$(eval echo "\$RPS_${mode}_passthrough")" \
      -v pu="$(awk '{print $2}' "$TMP/cpu.$mode.inspect" | median)" \
      -v ps="$(awk '{print $3}' "$TMP/cpu.$mode.inspect" | median)" \
      -v a="$(awk '{print $4}' "$TMP/cpu.$mode.inspect" | median)" \
      -v t="$(awk '{print $7}' "$TMP/cpu.$mode.inspect" | median)" \
    'BEGIN {want = g * r
            printf "%-5s %.1fx passthrough = %.0f req/s needs <= %.1f us machine CPU" \
                   " per request (inspect: %.1f) and <= %.1f us in the proxy thread" \
                   " (inspect: %.1f without the writer)\n",
                   m, g, want, n * 1e6 / want, t, 1e6 / want, pu + ps - a}'
done

# OpenSSL's own s_time cannot CONNECT through a proxy: it measures the peer, nginx, directly:
# full handshakes (no resumption) on one connection after another, with nginx's CPU per
# handshake from its ticks, the price one side of each new inspected connection pays too.
if [[ $S_TIME == 1 ]]; then
  n0=$(cpu_ticks "$NGINX_PID" $(children "$NGINX_PID"))
  w0=$(date +%s.%N)
  st=$(openssl s_time -connect "localhost:$NGINX_PORT" -CAfile "$TMP/pki/ca.pem" -new \
         -time "$DURATION" 2>/dev/null | grep 'connections in .* real seconds' | tail -1 || true)
  n1=$(cpu_ticks "$NGINX_PID" $(children "$NGINX_PID"))
  d=$(awk -v a="$w0" -v b="$(date +%s.%N)" 'BEGIN {print b - a}')
  conns=$(awk '{print $1}' <<< "$st")
  if [[ -n $conns && $conns -gt 0 ]]; then
    hs=$(awk -v c="$conns" -v d="$d" 'BEGIN {printf "%.0f", c / d}')
    hs_us=$(awk -v c="$conns" -v t=$((n1 - n0)) -v hz="$CLK_TCK" \
              'BEGIN {printf "%.1f", t * 1e6 / hz / c}')
    echo "openssl s_time -new against nginx directly: $hs handshakes/s," \
         "nginx $hs_us us of CPU per handshake"
    result tls.s_time.nginx.handshakes_per_s "$hs"
    result tls.s_time.nginx.cpu_us "$hs_us"
  fi
fi

if [[ $AUDIT == 1 ]]; then
  rows=$("$SLUICE" audit sql --db "$TMP/audit.db" "SELECT count(*) FROM requests" 2>/dev/null | tail -1 || echo "?")
  echo "requests audited: $rows"
fi
