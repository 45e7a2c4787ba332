#!/usr/bin/env python3
"""`sluice proxy --otlp-endpoint` against a small OTLP/HTTP receiver (docs/deploy.md
"OpenTelemetry"). Every POST is parsed with google.protobuf.json_format into the
ExportLogsServiceRequest / ExportMetricsServiceRequest messages compiled from the
opentelemetry-proto files in proto/ (unknown fields rejected), so a payload that strays from
the OTLP JSON mapping fails here. Then: a 503 is retried (honouring Retry-After) and the batch
arrives once, a 400 is not retried, a collector that stays down makes the drop counter rise
while traffic goes on, a dead collector and a silent one must not break traffic, and https
works with a test CA (--otlp-ca) and refuses a certificate for another name.

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
import ssl
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
    """OTLP/HTTP JSON on 127.0.0.1:0: /v1/logs and /v1/metrics, each body schema-checked.
    `refuse(path, n)` (n: how many POSTs to `path` came before) may answer a valid body with
    (status, headers) instead of 200: such a body is kept in `refused`, not taken. `tls`:
    (certificate file, key file) to serve https."""

    def __init__(self, logs_type, metrics_type, refuse=None, tls=None):
        from google.protobuf import json_format
        self.logs, self.metrics, self.errors, self.refused = [], [], [], []
        self.posts = {}
        self.lock = threading.Lock()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                kinds = {"/v1/logs": (logs_type, receiver.logs),
                         "/v1/metrics": (metrics_type, receiver.metrics)}
                headers = {}
                try:
                    if self.headers.get("Content-Type") != "application/json":
                        raise ValueError(f"Content-Type {self.headers.get('Content-Type')}")
                    msg_type, into = kinds[self.path]
                    msg = json_format.Parse(body, msg_type())  # unknown fields rejected
                    with receiver.lock:
                        n = receiver.posts.get(self.path, 0)
                        receiver.posts[self.path] = n + 1
                        answer = refuse(self.path, n) if refuse else None
                        if answer:
                            receiver.refused.append((self.path, answer[0], msg))
                        else:
                            into.append(msg)
                    status, headers = answer or (200, {})
                    self.send_response(status)
                except Exception as e:  # noqa: BLE001 - every failure is the test's finding
                    with receiver.lock:
                        receiver.errors.append(f"{self.path}: {e!r}: {body[:300]!r}")
                    self.send_response(400)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args):
                pass

        class Server(http.server.ThreadingHTTPServer):
            def handle_error(self, request, client_address):
                pass  # a refused TLS handshake is what some tests expect

        self.server = Server(("127.0.0.1", 0), Handler)
        if tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*tls)
            self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
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

    def __init__(self, sluice, policy_dir, endpoint, audit_db, extra=()):
        self.proc = subprocess.Popen(
            [sluice, "proxy", "--policy-dir", policy_dir, "--listen", "127.0.0.1:0",
             "--workflow", "otlp", "--threads", "1", "--audit", audit_db,
             "--otlp-endpoint", endpoint, "--otlp-interval", "1s", *extra],
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
                exported, dropped = summary(px.err)  # the proxy's last words
                assert exported == 0 and dropped >= 40, px.err  # 20 requests, 20 connections
            finally:
                px.kill()
    finally:
        silent.close()
    print("ok: dead and silent collectors did not break traffic")


def request_paths(messages):
    """sluice.path of every request record in these ExportLogsServiceRequests."""
    return [attrs(r).get("sluice.path") for m in messages for rl in m.resource_logs
            for sl in rl.scope_logs for r in sl.log_records
            if attrs(r).get("sluice.event") == "request"]


def record_count(messages):
    return sum(len(sl.log_records) for m in messages for rl in m.resource_logs
               for sl in rl.scope_logs)


def counter(receiver, name):
    return receiver.last_metrics().get(name, {}).get(frozenset(), 0)


def summary(err):
    """(exported, dropped) from the proxy's last words about the export, or None."""
    m = re.search(r"(\d+) records exported, (\d+) dropped", err)
    return (int(m.group(1)), int(m.group(2))) if m else None


def run_proxy(sluice, tmp, receiver_url, name, body, extra=()):
    """A proxy exporting to `receiver_url` for the time of body(proxy, upstream base URL)."""
    px = Proxy(sluice, os.path.join(tmp, "policies"), receiver_url,
               os.path.join(tmp, f"audit-{name}.db"), extra)
    try:
        body(px)
    finally:
        px.kill()
    return px


def check_retry_after_503(sluice, tmp, upstream, types):
    """The first POST of logs answered 503 with Retry-After: that batch is sent again and
    taken once; nothing is dropped."""
    base = f"http://127.0.0.1:{upstream.port}"
    rx = Receiver(*types, refuse=lambda path, n: (503, {"Retry-After": "1"})
                  if path == "/v1/logs" and n == 0 else None)
    try:
        def body(px):
            assert px.get(base + "/ok/retried") == 200
            wait_for("the retried request record",
                     lambda: "/ok/retried" in request_paths(rx.logs), lambda: rx.posts)
            px.stop()
        run_proxy(sluice, tmp, f"http://127.0.0.1:{rx.port}", "retry", body)
        refused = [m for path, _, m in rx.refused if path == "/v1/logs"]
        assert len(refused) == 1, rx.refused
        taken = [r.SerializeToString() for m in rx.logs for rl in m.resource_logs
                 for sl in rl.scope_logs for r in sl.log_records]
        for m in refused:
            for rl in m.resource_logs:
                for sl in rl.scope_logs:
                    for r in sl.log_records:
                        assert taken.count(r.SerializeToString()) == 1, r
        assert request_paths(rx.logs).count("/ok/retried") == 1, request_paths(rx.logs)
        assert counter(rx, "sluice_otlp_exported_total") == len(taken), rx.last_metrics()
        assert counter(rx, "sluice_otlp_dropped_total") == 0, rx.last_metrics()
        assert not rx.errors, rx.errors
    finally:
        rx.close()
    print("ok: a batch answered 503 was sent again after Retry-After and taken once")


def check_no_retry_on_400(sluice, tmp, upstream, types):
    """Logs answered 400: each batch is tried once and counted dropped at once."""
    base = f"http://127.0.0.1:{upstream.port}"
    rx = Receiver(*types, refuse=lambda path, n: (400, {}) if path == "/v1/logs" else None)

    def every_try_counted():
        with rx.lock:
            tried = [m for path, _, m in rx.refused if path == "/v1/logs"]
        return ("/ok/refused" in request_paths(tried)
                and counter(rx, "sluice_otlp_dropped_total") >= record_count(tried))
    try:
        def body(px):
            assert px.get(base + "/ok/refused") == 200
            # A retried batch would be counted only after its last try, with more tries seen.
            wait_for("the refused batch counted dropped", every_try_counted, rx.last_metrics)
            px.stop()
        run_proxy(sluice, tmp, f"http://127.0.0.1:{rx.port}", "refuse", body)
        tried = [m for path, _, m in rx.refused if path == "/v1/logs"]
        assert request_paths(tried).count("/ok/refused") == 1, request_paths(tried)
        assert not rx.logs and not rx.errors, (rx.logs, rx.errors)
    finally:
        rx.close()
    print("ok: a batch answered 400 was tried once and dropped")


def check_collector_down(sluice, tmp, upstream, types):
    """Logs answered 503 every time: the batch is dropped after its retries and counted, while
    the proxy keeps serving."""
    base = f"http://127.0.0.1:{upstream.port}"
    rx = Receiver(*types, refuse=lambda path, n: (503, {}) if path == "/v1/logs" else None)
    try:
        def body(px):
            assert px.get(base + "/ok/down-1") == 200
            wait_for("the drop counter to rise",
                     lambda: counter(rx, "sluice_otlp_dropped_total") >= 1, rx.last_metrics)
            for i in range(5):
                assert px.get(f"{base}/ok/down-{i + 2}") == 200, px.err
            px.stop()
        px = run_proxy(sluice, tmp, f"http://127.0.0.1:{rx.port}", "down", body)
        tried = [m for path, _, m in rx.refused if path == "/v1/logs"]
        assert request_paths(tried).count("/ok/down-1") > 1, "retried before dropping"
        exported, dropped = summary(px.err)
        assert exported == 0 and dropped >= 12, px.err  # a connection and a request each
    finally:
        rx.close()
    print("ok: a collector that stays down: drops counted, traffic served")


def make_certs(tmp):
    """A test CA and two certificates it signs: for IP 127.0.0.1, and for wrong.example."""
    if not shutil.which("openssl"):
        skip("openssl missing (Debian: openssl)")
    d = os.path.join(tmp, "tls")
    os.makedirs(d)
    p = lambda name: os.path.join(d, name)  # noqa: E731
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    subprocess.run(["openssl", "req", "-x509", *ec, "-keyout", p("ca.key"), "-out", p("ca.pem"),
                    "-days", "2", "-subj", "/CN=sluice otlp test CA", "-addext",
                    "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=keyCertSign"],
                   check=True, capture_output=True)
    out = {}
    for name, san in (("good", "IP:127.0.0.1"), ("wrong", "DNS:wrong.example")):
        with open(p(f"{name}.ext"), "w") as f:
            f.write(f"subjectAltName={san}\nextendedKeyUsage=serverAuth\n")
        subprocess.run(["openssl", "req", *ec, "-keyout", p(f"{name}.key"), "-out",
                        p(f"{name}.csr"), "-subj", f"/CN={name}"], check=True, capture_output=True)
        subprocess.run(["openssl", "x509", "-req", "-in", p(f"{name}.csr"), "-CA", p("ca.pem"),
                        "-CAkey", p("ca.key"), "-CAcreateserial", "-days", "2", "-out",
                        p(f"{name}.pem"), "-extfile", p(f"{name}.ext")],
                       check=True, capture_output=True)
        out[name] = (p(f"{name}.pem"), p(f"{name}.key"))
    return p("ca.pem"), out["good"], out["wrong"]


def check_https(sluice, tmp, upstream, types):
    """https:// with --otlp-ca: a certificate naming 127.0.0.1 is taken; one naming another
    host is refused (nothing sent, the records dropped)."""
    ca, good, wrong = make_certs(tmp)
    base = f"http://127.0.0.1:{upstream.port}"
    for name, cert in (("good", good), ("wrong", wrong)):
        rx = Receiver(*types, tls=cert)
        try:
            def body(px):
                assert px.get(base + "/ok/tls") == 200
                if name == "good":
                    wait_for("the record over https",
                             lambda: "/ok/tls" in request_paths(rx.logs), lambda: rx.posts)
                px.stop()
            px = run_proxy(sluice, tmp, f"https://127.0.0.1:{rx.port}", f"tls-{name}", body,
                           ("--otlp-ca", ca))
            assert not rx.errors, rx.errors
            if name == "good":
                assert counter(rx, "sluice_otlp_exported_total") >= 2, rx.last_metrics()
            else:
                assert not rx.posts, rx.posts
                assert "certificate verify failed" in px.err, px.err
                assert summary(px.err) and summary(px.err)[1] >= 2, px.err
        finally:
            rx.close()
    print("ok: https with a test CA; a certificate for another name refused")


def unix_get(sock_path, path):
    """GET `path` from an HTTP server on a Unix socket: the whole response as text."""
    with socket.socket(socket.AF_UNIX) as c:
        c.connect(sock_path)
        c.sendall(f"GET {path} HTTP/1.1\r\nHost: sluice\r\nConnection: close\r\n\r\n".encode())
        out = b""
        while chunk := c.recv(65536):
            out += chunk
    return out.decode()


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
        assert "sluice_otlp_exported_total" in m, m
        # /metrics has the exporter's counters too (root may read it).
        scraped = unix_get(os.path.join(tmp, "serve.sock"), "/metrics")
        assert re.search(r"^sluice_otlp_exported_total \d+$", scraped, re.M), scraped
        assert re.search(r"^sluice_otlp_dropped_total 0$", scraped, re.M), scraped
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not receiver.errors, receiver.errors
    print("ok: sluice serve exported its counters")


def main():
    faulthandler.dump_traceback_later(280, exit=True)  # a hang reports where
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
        types = (logs_type, metrics_type)
        check_retry_after_503(sluice, tmp, upstream, types)
        check_no_retry_on_400(sluice, tmp, upstream, types)
        check_collector_down(sluice, tmp, upstream, types)
        check_https(sluice, tmp, upstream, types)
    finally:
        for s in (receiver, upstream):
            if s:
                s.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
