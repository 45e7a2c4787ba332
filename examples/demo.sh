#!/usr/bin/env bash
# The end-to-end demo (`make demo`): an "agent" script runs under a workflow policy, reaches an
# allowed local upstream through sluice's proxy, is refused a denied host with the reason,
# fails to connect directly, writes an output file; then the receipt and the audit trail.
# Then a second agent calls an authenticated HTTPS API through TLS inspection: the proxy
# injects the bearer token, the sandbox only ever holds a placeholder, and the audit store
# records the secret's name, never its value.
# Needs root and no internet: the upstream is started here, on loopback.
# Usage: SLUICE=build/cli/sluice examples/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SLUICE="${SLUICE:-build/cli/sluice}"
SLUICE="$(realpath "$SLUICE")"
bold() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

# ---------------------------------------------------------------------------------------------
# Section 1: policy tools (owned by the policy component). What a security team runs in review.
# ---------------------------------------------------------------------------------------------
bold "sluice policy check examples/workflows"
"$SLUICE" policy check examples/workflows
bold "sluice policy explain: is https://pypi.org/simple/ allowed for package-install?"
"$SLUICE" policy explain --policy examples/workflows/package-install.yaml \
  --url https://pypi.org/simple/requests/ || true
bold "sluice policy explain: and a CONNECT to evil.example:443?"
"$SLUICE" policy explain --policy examples/workflows/package-install.yaml \
  --connect evil.example:443 || true
bold "sluice policy explain: pypi.org on port 8443?"
"$SLUICE" policy explain --policy examples/workflows/package-install.yaml \
  --connect pypi.org:8443 || true

# ---------------------------------------------------------------------------------------------
# Section 2: sluice run — the agent's code in the sandbox.
# ---------------------------------------------------------------------------------------------
if [ "$(id -u)" != 0 ]; then
  echo "demo: sluice run needs root; skipping the sandbox part" >&2
  exit 0
fi
WORK="$(mktemp -d /tmp/sluice-demo.XXXXXX)"
UPSTREAM_PID=""
API_PID=""
cleanup() {
  [ -n "$UPSTREAM_PID" ] && kill "$UPSTREAM_PID" 2>/dev/null || true
  [ -n "$API_PID" ] && kill "$API_PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

bold "starting the local upstream (loopback only)"
python3 examples/agent/upstream.py > "$WORK/upstream.port" 2> "$WORK/upstream.log" &
UPSTREAM_PID=$!
for _ in $(seq 50); do [ -s "$WORK/upstream.port" ] && break; sleep 0.1; done
PORT="$(head -n1 "$WORK/upstream.port")"
echo "upstream: http://localhost:$PORT/data.csv"
mkdir -p "$WORK/policies"
sed "s/@PORT@/$PORT/" examples/agent/demo-workflow.yaml.in > "$WORK/policies/demo-agent.yaml"
cat "$WORK/policies/demo-agent.yaml" | sed -n '/^egress:/,$p'

bold "sluice run --workflow demo-agent -- python3 /input/agent.py http://localhost:$PORT"
set +e
"$SLUICE" run --workflow demo-agent --policy-dir "$WORK/policies" --audit "$WORK/audit.db" \
  --input examples/agent/agent.py:agent.py --output-dir "$WORK/out" \
  --receipt "$WORK/receipt.json" -- python3 /input/agent.py "http://localhost:$PORT"
STATUS=$?
set -e
echo "sluice run exit status: $STATUS"

bold "the file the agent wrote to /output, copied to --output-dir"
cat "$WORK/out/summary.txt"

bold "the receipt (excerpt)"
python3 - "$WORK/receipt.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
show = {k: r[k] for k in ("execution_id", "workflow", "argv", "duration_ms", "exit", "limit_hit",
                          "usage", "artifacts", "network", "isolation", "hash")}
print(json.dumps(show, indent=2))
PY

bold "sluice audit query --db audit.db"
"$SLUICE" audit query --db "$WORK/audit.db" || true
bold "sluice audit query --decision deny"
"$SLUICE" audit query --db "$WORK/audit.db" --decision deny || true

# ---------------------------------------------------------------------------------------------
# Section 3: an authenticated HTTPS API, without handing the code the key (TLS inspection and
# credential injection). The API's certificate comes from a throwaway CA made here.
# ---------------------------------------------------------------------------------------------
bold "starting a local HTTPS API that wants a bearer token (loopback only)"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
  -subj "/CN=demo API CA" -keyout "$WORK/api-ca.key" -out "$WORK/api-ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=localhost" \
  -keyout "$WORK/api.key" -out "$WORK/api.csr" 2>/dev/null
printf 'subjectAltName=DNS:localhost\n' > "$WORK/api.ext"
openssl x509 -req -in "$WORK/api.csr" -CA "$WORK/api-ca.pem" -CAkey "$WORK/api-ca.key" \
  -CAcreateserial -days 1 -extfile "$WORK/api.ext" -out "$WORK/api.pem" 2>/dev/null
TOKEN="demo-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
DEMO_API_TOKEN="$TOKEN" python3 examples/agent/api_upstream.py "$WORK/api.pem" "$WORK/api.key" \
  > "$WORK/api.port" 2> "$WORK/api.log" &
API_PID=$!
for _ in $(seq 50); do [ -s "$WORK/api.port" ] && break; sleep 0.1; done
API_PORT="$(head -n1 "$WORK/api.port")"
echo "api: https://localhost:$API_PORT/v1/whoami"
sed "s/@PORT@/$API_PORT/" examples/agent/api-workflow.yaml.in > "$WORK/policies/demo-api.yaml"
sed -n '/^egress:/,$p' "$WORK/policies/demo-api.yaml"
( umask 077; printf 'api_token: {env: DEMO_API_TOKEN}\n' > "$WORK/secrets.yaml" )
echo "secrets.yaml (mode 0600): api_token comes from \$DEMO_API_TOKEN on the host"

bold "sluice run --workflow demo-api --secrets secrets.yaml -- python3 /input/api_agent.py"
set +e
DEMO_API_TOKEN="$TOKEN" "$SLUICE" run --workflow demo-api --policy-dir "$WORK/policies" \
  --audit "$WORK/audit.db" --secrets "$WORK/secrets.yaml" --upstream-ca "$WORK/api-ca.pem" \
  --input examples/agent/api_agent.py:api_agent.py \
  -- python3 /input/api_agent.py "https://localhost:$API_PORT"
API_STATUS=$?
set -e
echo "sluice run exit status: $API_STATUS"
if grep -q "$TOKEN" "$WORK/audit.db"* 2>/dev/null; then
  echo "demo: the secret reached the audit store — this is a bug" >&2
  STATUS=1
else
  echo "the secret's value is nowhere in the audit store; its name is:"
fi
"$SLUICE" audit sql --db "$WORK/audit.db" \
  "SELECT method, path, status, decision, rule_id, reason, injected_secrets FROM requests WHERE host = 'localhost' AND (injected_secrets <> '[]' OR reason <> 'allowed')" || true

bold "sluice audit verify"
"$SLUICE" audit verify --db "$WORK/audit.db" || true
[ "$API_STATUS" = 0 ] || STATUS="$API_STATUS"
exit "$STATUS"
