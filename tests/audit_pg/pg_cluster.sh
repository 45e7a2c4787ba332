#!/bin/sh
# A throwaway PostgreSQL cluster for the central-audit tests: `pg_cluster.sh start DIR` creates
# DIR/data with initdb and starts it listening on a Unix socket in DIR only (no TCP port);
# `pg_cluster.sh stop DIR` stops it and removes DIR. PostgreSQL refuses to run as root, so under
# root the cluster belongs to the `postgres` user the Debian package creates.
# Without PostgreSQL, start exits 0 and leaves no socket (the tests skip; under CI=true, fail).
set -eu
cmd=$1
dir=$2
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)

as_owner() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

case $cmd in
start)
  if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
    echo "pg_cluster: no PostgreSQL server (Debian: postgresql)" >&2
    if [ "${CI:-}" = true ]; then exit 1; fi
    exit 0
  fi
  "$0" stop "$dir" 2>/dev/null || true
  mkdir -p "$dir"
  if [ "$(id -u)" = 0 ]; then chown postgres "$dir"; fi
  as_owner "$bin/initdb" -D "$dir/data" -U postgres -A trust --no-sync >"$dir/initdb.log" 2>&1
  # Socket only, in DIR: no port to collide with; fsync off (a test cluster).
  as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -o \
    "-c listen_addresses='' -c unix_socket_directories='$dir' -c fsync=off -c max_connections=50" \
    start >/dev/null
  ;;
stop)
  if [ -n "$bin" ] && [ -f "$dir/data/postmaster.pid" ]; then
    as_owner "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null || true
  fi
  rm -rf "$dir"
  ;;
esac
