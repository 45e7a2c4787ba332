#!/usr/bin/env python3
"""The demo's local upstream: a tiny HTTP server on 127.0.0.1 (port chosen by the kernel).

Prints the port on its first line of stdout, then serves /data.csv until killed. Needs no
internet; stands in for "the stats API the agent is allowed to call".
"""
import http.server
import sys

DATA = b"region,sales\nnorth,120\nsouth,80\neast,95\nwest,105\n"


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path != "/data.csv":
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/csv")
        self.send_header("Content-Length", str(len(DATA)))
        self.end_headers()
        self.wfile.write(DATA)

    def log_message(self, fmt, *args):
        sys.stderr.write("upstream: " + (fmt % args) + "\n")


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
