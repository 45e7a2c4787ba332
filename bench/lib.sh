# Shared by the side-by-side benchmark scripts: tool installation, a scratch directory and
# the processes a script started (ended by pid on exit), loopback port helpers, medians.
# Usage: source "$(dirname "$0")/lib.sh"; bench_init PREFIX   (sets TMP; fill PIDS+=($!))

need() {  # need BINARY PACKAGE
  if ! command -v "$1" >/dev/null 2>&1 && [[ ! -x /usr/sbin/$1 ]]; then
    echo "installing $2" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$2" >/dev/null
  fi
}

PIDS=()
bench_stop() {  # ends the processes in PIDS (by pid), waits for them and forgets them
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  PIDS=()
}
bench_cleanup() {
  bench_stop
  rm -rf "$TMP"
}
bench_init() {  # bench_init PREFIX: scratch directory in $TMP, removed on exit
  TMP=$(mktemp -d "/tmp/$1.XXXXXX")
  trap bench_cleanup EXIT
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}
wait_port() {  # wait_port PORT: up to 10 s
  for _ in $(seq 100); do
    if python3 -c "import socket,sys; s=socket.socket(); s.settimeout(0.2); sys.exit(s.connect_ex(('127.0.0.1',$1)))" 2>/dev/null; then
      return 0
    fi
    sleep 0.1
  done
  echo "nothing listening on port $1" >&2
  exit 1
}
rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
# CPU of processes or threads so far, in clock ticks (getconf CLK_TCK): stat_cpu FILE... ->
# "user system" summed over /proc/.../stat files (all of a process's threads; one thread's with
# /proc/PID/task/TID/stat). Read after the ")" closing the name, so a name with spaces parses;
# a process that is gone counts 0.
stat_cpu() {
  for f in "$@"; do if [[ -r $f ]]; then sed 's/^.*) //' "$f"; fi; done |
    awk '{u += $12; s += $13} END {print u + 0, s + 0}'
}
proc_cpu() {  # proc_cpu PID... -> "user system" ticks of those processes
  local files=()
  for p in "$@"; do files+=("/proc/$p/stat"); done
  stat_cpu "${files[@]}"
}
cpu_ticks() { proc_cpu "$@" | awk '{print $1 + $2}'; }  # cpu_ticks PID...: user + system ticks
# machine_ticks: busy clock ticks of every CPU so far (user, nice, system, irq, softirq, steal)
machine_ticks() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

# bwrap running /bin/true cold: --unshare-all with read-only system binds (the baseline the
# start-up targets are measured against). Prints the command line.
bwrap_true() {
  local cmd=(bwrap --unshare-all --die-with-parent --ro-bind /usr /usr)
  for d in bin sbin lib lib32 lib64 libx32; do
    if [ -L "/$d" ]; then cmd+=(--symlink "$(readlink "/$d")" "/$d");
    elif [ -d "/$d" ]; then cmd+=(--ro-bind "/$d" "/$d"); fi
  done
  cmd+=(--proc /proc --dev /dev --tmpfs /tmp /bin/true)
  echo "${cmd[*]}"
}

# An upstream namespace reached over a veth pair: NS with NIF at PREFIX.2/24, HIF at
# PREFIX.1/24 on the host side, both up (and NS's lo). Removed on exit with the rest.
# Usage: veth_upstream NS HIF NIF PREFIX   (PREFIX like 10.235.0)
veth_upstream() {
  UPSTREAM_NS=$1; UPSTREAM_HIF=$2
  trap 'veth_upstream_cleanup; bench_cleanup' EXIT
  ip netns add "$1"
  ip link add "$2" type veth peer name "$3"
  ip link set "$3" netns "$1"
  ip addr add "$4.1/24" dev "$2"; ip link set "$2" up
  ip netns exec "$1" ip addr add "$4.2/24" dev "$3"
  ip netns exec "$1" ip link set "$3" up; ip netns exec "$1" ip link set lo up
}
veth_upstream_cleanup() {
  ip link del "$UPSTREAM_HIF" 2>/dev/null || true
  ip netns del "$UPSTREAM_NS" 2>/dev/null || true
}

# The options every side-by-side script takes: --no-audit sets AUDIT=0 (sluice without its
# audit store); the default, AUDIT=1, is how users run it. Other arguments are left in ARGS.
# Usage: bench_args "$@"; set -- "${ARGS[@]}"
bench_args() {
  AUDIT=${AUDIT:-1}
  ARGS=()
  for a in "$@"; do
    case $a in
      --no-audit) AUDIT=0 ;;
      *) ARGS+=("$a") ;;
    esac
  done
}
# result KEY VALUE: one figure for bench/run_all.sh's table (appended to $RESULTS when set).
result() {
  if [[ -n ${RESULTS:-} ]]; then echo "$1 $2" >> "$RESULTS"; fi
}

# The squid.conf lines both Squid peers share (one worker, no cache, no logs but cache.log, all
# under $TMP/squid): a script writes its own port lines, then appends these.
squid_common_conf() {
  cat <<EOF
workers 1
http_access allow all
cache deny all
cache_mem 0 MB
memory_pools off
access_log none
cache_store_log none
cache_log $TMP/squid/cache.log
pid_filename $TMP/squid/squid.pid
coredump_dir $TMP/squid
max_filedescriptors 65536
shutdown_lifetime 0 seconds
via off
forwarded_for delete
EOF
}

# A private upstream CA (CN=$1) and a certificate it signed for localhost / 127.0.0.1, in
# $TMP/pki: ca.pem, ca.key, server.pem, server.key (readable by all: servers may drop privileges).
upstream_pki() {  # upstream_pki CA_NAME
  mkdir -p "$TMP/pki"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj "/CN=$1" -keyout "$TMP/pki/ca.key" -out "$TMP/pki/ca.pem" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign" 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=localhost" \
    -keyout "$TMP/pki/server.key" -out "$TMP/pki/server.csr" 2>/dev/null
  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' > "$TMP/pki/ext"
  openssl x509 -req -in "$TMP/pki/server.csr" -CA "$TMP/pki/ca.pem" -CAkey "$TMP/pki/ca.key" \
    -CAcreateserial -days 2 -extfile "$TMP/pki/ext" -out "$TMP/pki/server.pem" 2>/dev/null
  chmod -R a+rX "$TMP/pki"
}
