#!/usr/bin/env python3
"""Runs inside the sandbox: calls the HTTPS API with the placeholder it was given.

The sandbox never holds the real token: $API_TOKEN is a random stand-in that the proxy swaps
for the secret only on requests that the `stats-api` rule allows.
"""
import os
import sys
import urllib.error
import urllib.request

base = sys.argv[1]
placeholder = os.environ.get("API_TOKEN", "")
print(f"agent: API_TOKEN in the sandbox is a placeholder: {placeholder[:14]}...")


def call(method, path):
    req = urllib.request.Request(base + path, method=method,
                                 headers={"Authorization": "Bearer " + placeholder})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            print(f"agent: {method} {path} -> {r.status} {r.read().decode().strip()}")
    except urllib.error.HTTPError as e:
        reason = e.headers.get("X-Sluice-Reason", "")
        print(f"agent: {method} {path} -> {e.code} {reason} {e.read().decode().strip()[:160]}")


call("GET", "/v1/whoami")      # allowed: the proxy swaps the placeholder for the real token
call("DELETE", "/v1/whoami")   # refused: the rule allows GET only
call("GET", "/admin")          # refused: the rule allows /v1/* only
