#!/usr/bin/env python3
"""HMAC signing through the inspecting proxy, checked by an upstream that verifies it.

  hmac_through_proxy.py PROXY_PORT PROXY_CA_PEM UPSTREAM_CERT_PEM UPSTREAM_KEY_PEM

Starts a TLS upstream on 127.0.0.1 (port 0) that verifies, with Python's own hmac module and
the key in $HMAC_TEST_KEY, the signature of every request by the Host it names:

  hook.test   GitHub webhooks: X-Hub-Signature-256 = "sha256=" + hex HMAC-SHA256(body)
  stamp.test  "timestamp.body": X-Signature = hex HMAC-SHA256(X-Timestamp + "." + body),
              X-Timestamp within 300 s of now
  sig.test    X-Signature = base64 HMAC-SHA512(method \\n path \\n query \\n timestamp \\n
              hex sha256(body))

then sends requests through the proxy (CONNECT, TLS to the proxy's leaf) with http.client (fresh
and kept-alive connections, Content-Length and chunked bodies) and urllib, and prints one JSON
object: {case: {"status": N, "verified": bool, "why": "..."}}. Neither the key nor a signature is
ever printed.
"""
import base64
import hashlib
import hmac
import http.client
import http.server
import json
import os
import ssl
import sys
import threading
import time
import urllib.request

KEY = os.environ["HMAC_TEST_KEY"].encode()


def verify(method, path, query, headers, body):
    host = headers.get("Host", "").split(":")[0]
    if host == "hook.test":
        want = "sha256=" + hmac.new(KEY, body, hashlib.sha256).hexdigest()
        got = headers.get("X-Hub-Signature-256", "")
        return hmac.compare_digest(want, got), "X-Hub-Signature-256"
    if host == "stamp.test":
        ts = headers.get("X-Timestamp", "")
        if not ts.isdigit() or abs(int(ts) - time.time()) > 300:
            return False, "X-Timestamp missing or stale"
        want = hmac.new(KEY, ts.encode() + b"." + body, hashlib.sha256).hexdigest()
        return hmac.compare_digest(want, headers.get("X-Signature", "")), "X-Signature"
    if host == "sig.test":
        ts = headers.get("X-Timestamp", "")
        msg = "\n".join([method, path, query, ts, hashlib.sha256(body).hexdigest()]).encode()
        want = base64.b64encode(hmac.new(KEY, msg, hashlib.sha512).digest()).decode()
        return hmac.compare_digest(want, headers.get("X-Signature", "")), "X-Signature"
    return False, "unknown host " + host


class Verifier(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def handle_any(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                body += self.rfile.read(size)
                self.rfile.readline()
            framing = "chunked"
        else:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            framing = "length"
        path, _, query = self.path.partition("?")
        ok, why = verify(self.command, path, query, self.headers, body)
        out = json.dumps({"verified": ok, "why": why, "framing": framing,
                          "body_bytes": len(body)}).encode()
        self.send_response(200 if ok else 401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    do_GET = do_POST = do_PUT = handle_any

    def log_message(self, *args):
        pass


def serve(cert, key):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Verifier)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def result(resp):
    data = resp.read()
    try:
        j = json.loads(data)
    except ValueError:
        j = {"why": data.decode(errors="replace")[:200]}
    return {"status": resp.status, "verified": bool(j.get("verified")), "why": j.get("why", ""),
            "framing": j.get("framing", ""), "reason": resp.getheader("X-Sluice-Reason", "")}


def main():
    proxy_port, proxy_ca, cert, key = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    server = serve(cert, key)
    port = server.server_address[1]
    ctx = ssl.create_default_context(cafile=proxy_ca)
    out = {}

    def connection(host):
        c = http.client.HTTPSConnection("127.0.0.1", proxy_port, context=ctx, timeout=20)
        c.set_tunnel(host, port)
        return c

    def send(c, name, method, path, body=None, headers=None, chunked=False):
        h = dict(headers or {})
        if chunked:
            c.request(method, path, body=iter([body[:7], body[7:]]), headers=h,
                      encode_chunked=True)
        else:
            c.request(method, path, body=body, headers=h)
        out[name] = result(c.getresponse())

    payload = b'{"action":"opened","number":42}'
    # Fresh connections, one request each.
    for name, host in [("hook_fresh", "hook.test"), ("stamp_fresh", "stamp.test")]:
        c = connection(host)
        send(c, name, "POST", "/hook", payload, {"Content-Type": "application/json"})
        c.close()
    # One kept-alive connection: Content-Length, chunked, a forged signature, an empty body.
    c = connection("hook.test")
    send(c, "hook_kept_1", "POST", "/hook", payload)
    send(c, "hook_kept_chunked", "POST", "/hook", b"chunked body " * 50, chunked=True)
    send(c, "hook_kept_forged", "POST", "/hook", payload,
         {"X-Hub-Signature-256": "sha256=" + "0" * 64})
    send(c, "hook_kept_empty", "POST", "/hook", b"")
    c.close()
    c = connection("stamp.test")
    send(c, "stamp_kept_1", "POST", "/events", b"first")
    send(c, "stamp_kept_chunked", "PUT", "/events/2", b"second, chunked", chunked=True)
    c.close()
    c = connection("sig.test")
    send(c, "sig_get", "GET", "/v1/items?b=2&a=1")
    send(c, "sig_post", "POST", "/v1/items", b"name=x&size=3")
    c.close()
    # urllib through the proxy (a fresh CONNECT per request).
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({"https": "http://127.0.0.1:%d" % proxy_port}),
        urllib.request.HTTPSHandler(context=ctx))
    req = urllib.request.Request("https://hook.test:%d/hook" % port, data=payload, method="POST")
    try:
        out["hook_urllib"] = result(opener.open(req, timeout=20))
    except urllib.error.HTTPError as e:
        out["hook_urllib"] = result(e)
    server.shutdown()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
