#!/usr/bin/env python3
"""`sluice mcp` round trips, measured at the client (a raw JSON-RPC client on the pipes):
tools/call run_command of `true` (argv ["true"] and command "true", i.e. /bin/sh -c true),
each call waiting for its answer before the next, plus `ping` for the protocol alone; and, for
comparison in the same run, the same exec through `sluice serve`'s session API
(POST /v1/sessions/{id}/exec over its Unix socket, keep-alive), which MCP's tools/call wraps.
Prints median, p90, p99 and max per kind. Needs root (the sandbox).

Usage: bench/mcp_latency.py [--no-audit] [SLUICE_BINARY]   Env: CALLS (default 200), WARMUP
(default 20). `sluice mcp` and `sluice serve` always record to their audit store (neither has
a mode without it): --no-audit is accepted and changes nothing.
"""
import http.client
import json
import os
import socket
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ARGS = [a for a in sys.argv[1:] if a != "--no-audit"]
SLUICE = os.path.realpath(ARGS[0] if ARGS else "build/cli/sluice")
CALLS = int(os.environ.get("CALLS", "200"))
WARMUP = int(os.environ.get("WARMUP", "20"))


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost")
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.path)


def serve_exec(tmp, print_row):
    sock = os.path.join(tmp, "serve.sock")
    proc = subprocess.Popen([SLUICE, "serve", "--policy-dir", os.path.join(tmp, "policies"),
                             "--listen", "unix:" + sock, "--audit", os.path.join(tmp, "serve.db")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(500):  # until the daemon accepts
            try:
                probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                probe.connect(sock)
                probe.close()
                break
            except OSError:
                time.sleep(0.01)
        conn = UnixHTTPConnection(sock)

        def post(path, body):
            t0 = time.perf_counter()
            conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
            r = conn.getresponse()
            data = r.read()
            dt = time.perf_counter() - t0
            assert r.status in (200, 201), (r.status, data)
            return json.loads(data), dt

        session, _ = post("/v1/sessions", {"workflow": "bench"})
        times = []
        for i in range(WARMUP + CALLS):
            receipt, dt = post("/v1/sessions/%s/exec" % session["id"], {"argv": ["true"]})
            assert receipt["exit"]["code"] == 0, receipt
            if i >= WARMUP:
                times.append(dt * 1000)
        print_row('serve session exec ["true"]', times)
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def main():
    tmp = tempfile.mkdtemp(prefix="sluice-bench-mcp-")
    os.makedirs(os.path.join(tmp, "policies"))
    with open(os.path.join(tmp, "policies", "bench.yaml"), "w") as f:
        f.write("apiVersion: sluice/v1\nkind: Workflow\nname: bench\nsandbox:\n  timeout: 30s\n"
                "  network: none\n")
    proc = subprocess.Popen([SLUICE, "mcp", "--policy-dir", os.path.join(tmp, "policies"),
                             "--workflow", "bench", "--audit", os.path.join(tmp, "audit.db")],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, bufsize=0)
    next_id = [0]

    def rpc(method, params=None):
        next_id[0] += 1
        msg = {"jsonrpc": "2.0", "id": next_id[0], "method": method}
        if params is not None:
            msg["params"] = params
        t0 = time.perf_counter()
        proc.stdin.write(json.dumps(msg).encode() + b"\n")
        line = proc.stdout.readline()
        dt = time.perf_counter() - t0
        got = json.loads(line)
        assert got.get("id") == next_id[0] and "result" in got, got
        return got["result"], dt

    rpc("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "bench", "version": "1"}})
    kinds = {
        "ping": ("ping", None),
        'run_command argv ["true"]': ("tools/call", {"name": "run_command", "arguments": {"argv": ["true"]}}),
        'run_command command "true"': ("tools/call", {"name": "run_command", "arguments": {"command": "true"}}),
    }
    print("sluice mcp round trips, %d calls each after %d warm-up (ms)" % (CALLS, WARMUP))
    print("%-30s %8s %8s %8s %8s" % ("call", "median", "p90", "p99", "max"))

    def print_row(name, times):
        print("%-30s %8.3f %8.3f %8.3f %8.3f" % (name, statistics.median(times), pct(times, 90),
                                                 pct(times, 99), max(times)))

    for name, (method, params) in kinds.items():
        for _ in range(WARMUP):
            rpc(method, params)
        times = []
        for _ in range(CALLS):
            result, dt = rpc(method, params)
            if method == "tools/call":
                assert result["isError"] is False and result["structuredContent"]["exit"]["code"] == 0, result
            times.append(dt * 1000)
        print_row(name, times)
    proc.stdin.close()
    proc.wait(timeout=60)
    serve_exec(tmp, print_row)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
