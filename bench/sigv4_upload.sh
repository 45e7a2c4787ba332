#!/usr/bin/env bash
# What re-signing a streaming S3 upload costs: one SIZE-byte aws-chunked PUT
# (STREAMING-AWS4-HMAC-SHA256-PAYLOAD, 64 KiB chunks) through `sluice run` (inject.aws_sigv4:
# the client inside the sandbox signs with the placeholder key, the proxy checks every chunk
# and signs it again with the real key) against the same client uploading directly to the same
# loopback HTTPS upstream with the real key, in one run. Prints the MB/s of each, their ratio,
# and the `sluice` process's RSS when the upload's header reached the upstream vs its peak RSS
# (VmHWM, reset at that moment) when the last chunk had: constant memory means the peak stays
# near the RSS before, whatever SIZE is.
#
# The client is tests/proxy/sigv4_stream_client.py (botocore signs the request, the chunk
# chain is computed by hand; one random MiB repeated, so it hashes little and spends its time
# on framing, one HMAC per chunk and TLS). The upstream is tests/proxy/sigv4_stream_upstream.py:
# with UPSTREAM_MODE=verify (default) it checks the seed signature with botocore and every chunk
# signature with the real key (one SHA-256 of the data and one HMAC per chunk), with
# UPSTREAM_MODE=count it only frames and counts the chunks. Both are Python: the script says
# when either spent most of the upload on the CPU (then it, not the proxy, set the pace).
# Only processes this script started are stopped, by pid.
#
# Usage: bench/sigv4_upload.sh [path/to/sluice]   (default build/cli/sluice; run as root)
# Env:   SIZE (bytes, default 2 GiB), UPSTREAM_MODE (verify | count, default verify)
set -euo pipefail

SLUICE=${1:-${SLUICE:-build/cli/sluice}}
SIZE=${SIZE:-$((2 << 30))}
UPSTREAM_MODE=${UPSTREAM_MODE:-verify}
HERE=$(cd "$(dirname "$0")" && pwd)
CLIENTS=$(cd "$HERE/../tests/proxy" && pwd)

if [[ ! -x $SLUICE ]]; then
  echo "$SLUICE not found (build the sluice target, or pass its path)" >&2
  exit 2
fi
SLUICE=$(readlink -f "$SLUICE")

source "$HERE/lib.sh"
need openssl openssl
need python3 python3
python3 -c 'import botocore' 2>/dev/null || need python3 python3-botocore

bench_init sluice-sigv4upload
chmod 755 "$TMP"
random_text() {  # random_text N ALPHABET
  python3 -c 'import secrets, sys; print("".join(secrets.choice(sys.argv[2]) for _ in range(int(sys.argv[1]))))' "$@"
}
REAL_ID=AKIA$(random_text 16 ABCDEFGHIJKLMNOPQRSTUVWXYZ234567)
REAL_SECRET=$(random_text 40 ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789)

# ---- a private upstream CA and a certificate for "localhost" ------------------------------
upstream_pki "sigv4 bench upstream CA"

# ---- the upstream, measuring the process named in $TMP/measured.pid --------------------------
python3 "$CLIENTS/sigv4_stream_upstream.py" --cert "$TMP/pki/server.pem" \
  --key "$TMP/pki/server.key" --portfile "$TMP/port" --log "$TMP/upstream.log" \
  --id "$REAL_ID" --secret "$REAL_SECRET" --mode "$UPSTREAM_MODE" \
  --pidfile "$TMP/measured.pid" 2> "$TMP/upstream.stderr" &
PIDS+=($!)
for _ in $(seq 100); do [[ -s $TMP/port ]] && break; sleep 0.1; done
PORT=$(cat "$TMP/port")
wait_port "$PORT"

# ---- direct: the same client with the real key ----------------------------------------------
python3 "$CLIENTS/sigv4_stream_client.py" --direct --port "$PORT" --cafile "$TMP/pki/ca.pem" \
  --id "$REAL_ID" --secret "$REAL_SECRET" --size "$SIZE" --path /bucket/direct.bin \
  > "$TMP/direct.json"

# ---- through `sluice run`: the client in the sandbox with the placeholder key ---------------
mkdir -p "$TMP/policies"
cat > "$TMP/policies/s3.yaml" <<EOF
apiVersion: sluice/v1
kind: Workflow
name: sigv4-upload-bench
sandbox:
  timeout: 300s
  memory: 1GiB
  network: proxy
egress:
  rules:
    - id: s3
      action: allow
      hosts: [localhost]
      ports: [$PORT]
      allow_private: true
      cidrs: ["127.0.0.0/8"]
      tls: inspect
      methods: [PUT]
      inject:
        aws_sigv4:
          access_key_id: \${secret:aws_id}
          secret_access_key: \${secret:aws_key}
  limits:
    max_bytes_out: $(( SIZE / (1 << 20) + 64 ))MiB
EOF
printf 'aws_id: {value: "%s"}\naws_key: {value: "%s"}\n' "$REAL_ID" "$REAL_SECRET" \
  > "$TMP/secrets.yaml"
chmod 600 "$TMP/secrets.yaml"
"$SLUICE" run --workflow sigv4-upload-bench --policy-dir "$TMP/policies" \
  --audit "$TMP/audit.db" --secrets "$TMP/secrets.yaml" --upstream-ca "$TMP/pki/ca.pem" \
  --input "$CLIENTS/sigv4_stream_client.py:client.py" \
  -- python3 /input/client.py --port "$PORT" --size "$SIZE" --path /bucket/proxied.bin \
  --warmup $((1 << 20)) > "$TMP/proxied.json" 2> "$TMP/sluice.log" &
SLUICE_PID=$!
echo "$SLUICE_PID" > "$TMP/measured.pid"
if ! wait "$SLUICE_PID"; then
  echo "sluice run failed:" >&2
  tail -20 "$TMP/sluice.log" >&2
  cat "$TMP/proxied.json" "$TMP/upstream.log" >&2
  exit 1
fi

# ---- report -----------------------------------------------------------------------------------
python3 - "$TMP/direct.json" "$TMP/proxied.json" "$TMP/upstream.log" "$SIZE" "$UPSTREAM_MODE" <<'EOF'
import json, sys
direct_file, proxied_file, upstream_file, size, mode = sys.argv[1:6]
def last(path, upload):
    rows = [json.loads(l) for l in open(path) if l.startswith("{")]
    return [r for r in rows if r.get("path") == upload][-1]
client = {"direct": last(direct_file, "/bucket/direct.bin"),
          "proxied": last(proxied_file, "/bucket/proxied.bin")}
upstream = {"direct": last(upstream_file, "/bucket/direct.bin"),
            "proxied": last(upstream_file, "/bucket/proxied.bin")}
print(f"== streaming SigV4 upload, {int(size) / 2**30:.2f} GiB in 64 KiB chunks, "
      f"upstream {'verifies every chunk' if mode == 'verify' else 'counts chunks'} ==")
rate = {}
for k in ("direct", "proxied"):
    c, u = client[k], upstream[k]
    if c["status"] != 200 or not u.get("ok"):
        sys.exit(f"{k} upload failed: {c} / {u}")
    rate[k] = c["bytes"] / c["seconds"] / 1e6
    busy = c["cpu_seconds"] / c["seconds"]
    up_busy = u["cpu_seconds"] / u["seconds"]
    who = [n for n, b in (("client", busy), ("upstream", up_busy)) if b > 0.85]
    note = f"  (the Python {' and '.join(who)} busy most of the time: set the pace)" if who else ""
    print(f"{k:8} {rate[k]:8.1f} MB/s  CPU: client {busy:4.0%}, upstream {up_busy:4.0%}{note}")
print(f"ratio    {rate['proxied'] / rate['direct']:8.2f}  (through sluice / direct)")
u = upstream["proxied"]
print(f"sluice RSS before the upload {u['rss_before_kb'] / 1024:.1f} MiB, "
      f"peak during it {u['rss_peak_kb'] / 1024:.1f} MiB "
      f"(+{(u['rss_peak_kb'] - u['rss_before_kb']) / 1024:.1f} MiB)")
EOF
