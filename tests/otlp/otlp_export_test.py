#!/usr/bin/env python3
"""`sluice proxy --otlp-endpoint` against a small OTLP/HTTP receiver (docs/deploy.md
"OpenTelemetry"). Every POST is parsed with google.protobuf.json_format into the
ExportLogsServiceRequest / ExportMetricsServiceRequest messages compiled from the
opentelemetry-proto files in proto/ (unknown fields rejected), so a payload that strays from
the OTLP JSON mapping fails here. Then: a dead collector and a silent one must not break traffic.

usage: otlp_export_test.py SLUICE_BINARY
Exit 77 (skip) when protoc or python3-protobuf is missing, unless CI=true.
"""
import faulthandler
import http.server
import importlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
DEADLINE = 20  # seconds to wait for an export; a bound, not a measured threshold


def skip(why):
    if os.environ.get("CI") == "true":
        sys.exit(f"FAIL: {why}")
    print(f"SKIP: {why}")
    sys.exit(77)


def compile_protos(out):
    """The OTLP service messages, compiled from proto/ with protoc into `out`."""
    if not shutil.which("protoc"):
        skip("protoc missing (Debian: protobuf-compiler)")
    try:
        from google.protobuf import json_format  # noqa: F401
    except ImportError:
        skip("google.protobuf missing (Debian: python3-protobuf)")
    proto = os.path.join(HERE, "proto")
    files = [os.path.relpath(os.path.join(d, f), proto)
             for d, _, fs in os.walk(proto) for f in fs if f.endswith(".proto")]
    subprocess.run(["protoc", f"-I{proto}", f"--python_out={out}", *files], check=True)
    sys.path.insert(0, out)
    logs = importlib.import_module("opentelemetry.proto.collector.logs.v1.logs_service_pb2")
    metrics = importlib.import_module(
        "opentelemetry.proto.collector.metrics.v1.metrics_service_pb2")
    return logs.ExportLogsServiceRequest, metrics.ExportMetricsServiceRequest


class Receiver:
    """OTLP/HTTP JSON on 127.0.0.1:0: /v1/logs and /v1/metrics, each body schema-checked."""

    def __init__(self, logs_type, metrics_type):
        from google.protobuf import json_format
        self.logs, self.metrics, self.errors = [], [], []
        self.lock = threading.Lock()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                kinds = {"/v1/logs": (logs_type, receiver.logs),
                         "/v1/metrics": (metrics_type, receiver.metrics)}
                try:
                    if self.headers.get("Content-Type") != "application/json":
                        raise ValueError(f"Content-Type {self.headers.get('Content-Type')}")
                    msg_type, into = kinds[self.path]
                    msg = json_format.Parse(body, msg_type())  # unknown fields rejected
                    with receiver.lock:
                        into.append(msg)
                    self.send_response(200)
                except Exception as e:  # noqa: BLE001 - every failure is the test's finding
                    with receiver.lock:
                        receiver.errors.append(f"{self.path}: {e!r}: {body[:300]!r}")
                    self.send_response(400)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def records(self):
        with self.lock:
            return [r for m in self.logs for rl in m.resource_logs for sl in rl.scope_logs
                    for r in sl.log_records]

    def last_metrics(self):
        """{name: {frozenset(attributes): value}} of the newest metrics export."""
        with self.lock:
            if not self.metrics:
                return {}
            m = self.metrics[-1]
        out = {}
        for rm in m.resource_metrics:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    assert metric.sum.is_monotonic, metric.name
                    assert metric.sum.aggregation_temporality == 2, metric.name  # CUMULATIVE
                    for p in metric.sum.data_points:
                        key = frozenset((a.key, a.value.string_value) for a in p.attributes)
                        out.setdefault(metric.name, {})[key] = p.as_int
        return out

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class Upstream:
    """A plain HTTP origin on 127.0.0.1:0 answering 200 "ok"."""

    def __init__(self):
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class Proxy:
    """`sluice proxy` serving workflow `otlp` with --otlp-endpoint; stderr kept."""

    def __init__(self, sluice, policy_dir, endpoint, audit_db):
        self.proc = subprocess.Popen(
            [sluice, "proxy", "--policy-dir", policy_dir, "--listen", "127.0.0.1:0",
             "--workflow", "otlp", "--threads", "1", "--audit", audit_db,
             "--otlp-endpoint", endpoint, "--otlp-interval", "1s"],
            stderr=subprocess.PIPE, text=True)
        self.err = ""
        self.port = None
        for line in self.proc.stderr:
            self.err += line
            m = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                break
        threading.Thread(target=self._drain, daemon=True).start()
        assert self.port, f"proxy did not start:\n{self.err}"

    def _drain(self):
        for line in self.proc.stderr:
            self.err += line

    def get(self, url):
        opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({"http": f"http://127.0.0.1:{self.port}"}))
        try:
            with opener.open(url, timeout=30) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout=60)
        assert rc == 0, f"proxy exited {rc}:\n{self.err}"


def write_policy(policy_dir, upstream_port):
    with open(os.path.join(policy_dir, "otlp.yaml"), "w") as f:
        f.write("apiVersion: sluice/v1\nkind: Workflow\nname: otlp\negress:\n  rules:\n"
                "    - id: local-ok\n      action: allow\n      cidrs: [\"127.0.0.0/8\"]\n"
                f"      allow_private: true\n      ports: [{upstream_port}]\n"
                "      paths: [\"/ok/*\"]\n")


def wait_for(what, cond, seen=lambda: ""):
    end = time.monotonic() + DEADLINE
    while time.monotonic() < end:
        got = cond()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}; have: {seen()}")


def attrs(record):
    out = {}
    for a in record.attributes:
        v = a.value
        out[a.key] = v.string_value if v.HasField("string_value") else v.int_value
    return out


def request_record(receiver, decision):
    for r in receiver.records():
        a = attrs(r)
        if a.get("sluice.event") == "request" and a.get("sluice.decision") == decision:
            return r, a
    return None


def check_export(sluice, tmp, receiver, upstream):
    px = Proxy(sluice, os.path.join(tmp, "policies"), f"http://127.0.0.1:{receiver.port}",
               os.path.join(tmp, "audit.db"))
    try:
        check_exported(px, receiver, upstream)
    finally:
        px.kill()


def check_exported(px, receiver, upstream):
    base = f"http://127.0.0.1:{upstream.port}"
    assert px.get(base + "/ok/1") == 200
    assert px.get(base + "/no?x=1") == 403
    allow, a = wait_for("the allowed request's log record", lambda: request_record(receiver, "allow"))
    assert allow.severity_number == 9 and allow.severity_text == "INFO", allow
    assert a["sluice.rule"] == "local-ok" and a["sluice.method"] == "GET", a
    assert a["sluice.host"] == "127.0.0.1" and a["sluice.port"] == upstream.port, a
    assert a["sluice.path"] == "/ok/1" and a["sluice.workflow"] == "otlp", a
    deny, d = wait_for("the denied request's log record", lambda: request_record(receiver, "deny"))
    assert deny.severity_number == 13 and deny.severity_text == "WARN", deny
    assert d["sluice.reason"] == "path_not_allowed" and d["sluice.path"] == "/no", d
    assert deny.time_unix_nano > 0 and deny.body.string_value.startswith("request deny"), deny

    def counted():
        m = receiver.last_metrics()
        dec = m.get("sluice_decisions_total", {})
        allowed = sum(n for k, n in dec.items() if ("decision", "allow") in k)
        denied = dec.get(frozenset({("decision", "deny"), ("reason", "path_not_allowed")}), 0)
        return m if allowed >= 1 and denied >= 1 else None

    m = wait_for("a metrics export with both decisions counted", counted, receiver.last_metrics)
    attempts = m["sluice_network_attempts_total"]
    assert attempts[frozenset({("outcome", "denied")})] >= 1, attempts
    assert m["sluice_otlp_dropped_total"][frozenset()] == 0, m
    px.stop()
    assert not receiver.errors, receiver.errors
    print(f"ok: {len(receiver.records())} log records, {len(receiver.metrics)} metrics exports")


def check_dead_collectors(sluice, tmp, upstream):
    """Nothing listening, then a listener that never answers: traffic goes on regardless."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    dead_port = closed.getsockname()[1]
    closed.close()  # nothing listens there now: connections are refused
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)  # accepts in the kernel, never reads nor answers
    try:
        for port in (dead_port, silent.getsockname()[1]):
            px = Proxy(sluice, os.path.join(tmp, "policies"), f"http://127.0.0.1:{port}",
                       os.path.join(tmp, f"audit-{port}.db"))
            try:
                base = f"http://127.0.0.1:{upstream.port}"
                for i in range(20):
                    assert px.get(f"{base}/ok/{i}") == 200, px.err
                    assert px.get(f"{base}/no/{i}") == 403, px.err
                px.stop()
                assert "otlp export to" in px.err, px.err
            finally:
                px.kill()
    finally:
        silent.close()
    print("ok: dead and silent collectors did not break traffic")


def check_serve(sluice, tmp, receiver):
    """`sluice serve --otlp-endpoint`: its /metrics counters arrive as schema-valid Sums."""
    before = len(receiver.metrics)
    proc = subprocess.Popen(
        [sluice, "serve", "--policy-dir", os.path.join(tmp, "policies"), "--listen",
         "unix:" + os.path.join(tmp, "serve.sock"), "--audit", os.path.join(tmp, "serve.db"),
         "--log-format", "text", "--otlp-endpoint", f"http://127.0.0.1:{receiver.port}",
         "--otlp-interval", "1s"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for("a metrics export from sluice serve",
                 lambda: len(receiver.metrics) > before
                 and "sluice_runs_total" in receiver.last_metrics(), receiver.last_metrics)
        m = receiver.last_metrics()
        assert m["sluice_otlp_dropped_total"][frozenset()] == 0, m
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not receiver.errors, receiver.errors
    print("ok: sluice serve exported its counters")


def main():
    faulthandler.dump_traceback_later(240, exit=True)  # a hang reports where
    sluice = sys.argv[1]
    tmp = tempfile.mkdtemp(prefix="sluice-otlp-")
    receiver = upstream = None
    try:
        logs_type, metrics_type = compile_protos(tmp)
        os.makedirs(os.path.join(tmp, "policies"))
        upstream = Upstream()
        write_policy(os.path.join(tmp, "policies"), upstream.port)
        receiver = Receiver(logs_type, metrics_type)
        check_export(sluice, tmp, receiver, upstream)
        check_serve(sluice, tmp, receiver)
        check_dead_collectors(sluice, tmp, upstream)
    finally:
        for s in (receiver, upstream):
            if s:
                s.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
