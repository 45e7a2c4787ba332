#!/usr/bin/env bash
# The end-to-end demo (`make demo`): an "agent" script runs under a workflow policy, reaches an
# allowed local upstream through sluice's proxy, is refused a denied host with the reason,
# fails to connect directly, writes an output file; then the receipt and the audit trail.
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
cleanup() {
  [ -n "$UPSTREAM_PID" ] && kill "$UPSTREAM_PID" 2>/dev/null || true
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
bold "sluice audit verify"
"$SLUICE" audit verify --db "$WORK/audit.db" || true
exit "$STATUS"
