#!/usr/bin/env python3
"""Client side of bench/serve_latency.sh: latency of `sluice serve` calls measured at the
client over its Unix socket, one kept-alive connection per client thread.

  serve_load.py SOCKET runs N            POST /v1/runs of /bin/true, sequential (PACE_MS=M:
                                         M ms between requests, so a warm pool can refill)
  serve_load.py SOCKET exec N            one session, N execs of /bin/true, sequential
  serve_load.py SOCKET concurrent N C    N runs spread over C concurrent clients

Prints one JSON object: {"n", "p50_ms", "p99_ms", "mean_ms", "per_s", "errors"}.
"""
import http.client
import json
import os
import socket
import statistics
import sys
import threading
import time


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("sluice", timeout=120)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(120)
        self.sock.connect(self.path)


def call(conn, method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"} if data is not None else {}
    conn.request(method, path, body=data, headers=headers)
    resp = conn.getresponse()
    payload = resp.read()
    return resp.status, payload


def timed(conn, method, path, body, times, errors):
    t0 = time.perf_counter()
    status, payload = call(conn, method, path, body)
    times.append((time.perf_counter() - t0) * 1000)
    if status != 200 or json.loads(payload)["exit"]["code"] != 0:
        errors.append(status)


def summary(times, errors, wall):
    times = sorted(times)
    return {"n": len(times), "p50_ms": round(statistics.median(times), 3),
            "p99_ms": round(times[min(len(times) - 1, int(len(times) * 0.99))], 3),
            "mean_ms": round(statistics.fmean(times), 3),
            "per_s": round(len(times) / wall, 1), "errors": len(errors)}


def main():
    sock, mode, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    run = {"workflow": "bench", "argv": ["/bin/true"]}
    times, errors = [], []
    if mode == "runs":
        conn = UnixConnection(sock)
        for _ in range(5):
            call(conn, "POST", "/v1/runs", run)  # warm-up
        pace = float(os.environ.get("PACE_MS", "0")) / 1000
        t0 = time.perf_counter()
        for _ in range(n):
            timed(conn, "POST", "/v1/runs", run, times, errors)
            if pace:
                time.sleep(pace)  # lets a warm pool refill between requests
        wall = time.perf_counter() - t0
    elif mode == "exec":
        conn = UnixConnection(sock)
        status, payload = call(conn, "POST", "/v1/sessions", {"workflow": "bench"})
        assert status == 201, payload
        sid = json.loads(payload)["id"]
        for _ in range(5):
            call(conn, "POST", f"/v1/sessions/{sid}/exec", {"argv": ["/bin/true"]})
        t0 = time.perf_counter()
        for _ in range(n):
            timed(conn, "POST", f"/v1/sessions/{sid}/exec", {"argv": ["/bin/true"]}, times, errors)
        wall = time.perf_counter() - t0
        call(conn, "DELETE", f"/v1/sessions/{sid}")
    elif mode == "concurrent":
        clients = int(sys.argv[4])
        lock = threading.Lock()

        def worker(count):
            conn = UnixConnection(sock)
            mine, errs = [], []
            for _ in range(count):
                timed(conn, "POST", "/v1/runs", run, mine, errs)
            with lock:
                times.extend(mine)
                errors.extend(errs)

        threads = [threading.Thread(target=worker, args=(n // clients,)) for _ in range(clients)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
    else:
        sys.exit(f"unknown mode {mode}")
    print(json.dumps(summary(times, errors, wall)))


if __name__ == "__main__":
    main()
