#!/usr/bin/env python3
"""The demo's HTTPS API: stands in for a real service that wants a bearer token.

Usage: api_upstream.py CERT KEY   (the token it accepts comes from $DEMO_API_TOKEN)
Prints its port on the first line of stdout; GET /v1/whoami answers 200 only with the right
`Authorization: Bearer <token>`, 401 otherwise. Loopback only.
"""
import http.server
import os
import ssl
import sys

TOKEN = os.environ["DEMO_API_TOKEN"]


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path != "/v1/whoami":
            self.send_error(404)
            return
        ok = self.headers.get("Authorization") == "Bearer " + TOKEN
        body = b"authorized: the proxy injected the right token\n" if ok else b"no valid token\n"
        self.send_response(200 if ok else 401)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt, *args):
        sys.stderr.write("api: " + (fmt % args) + "\n")


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[1], sys.argv[2])
server.socket = ctx.wrap_socket(server.socket, server_side=True)
print(server.server_address[1], flush=True)
server.serve_forever()
