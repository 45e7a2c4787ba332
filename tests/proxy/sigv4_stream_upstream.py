"""An S3-like HTTPS upstream on 127.0.0.1 that takes aws-chunked streaming uploads
(STREAMING-AWS4-HMAC-SHA256-PAYLOAD) of any size in constant memory, for the streaming SigV4
test (tests/proxy/sigv4_stream_test.cpp) and bench/sigv4_upload.sh.

The request's seed signature is checked with botocore's own signer (sigv4_botocore.py) and the
REAL key; then the body is read chunk by chunk and, with --mode verify (the default), every
chunk signature is checked against the real key's chain (SHA-256 of the chunk's data and one
HMAC each); with --mode count the chunks are only framed and counted. Each upload is answered
200 or 403 with a JSON body, also appended as one line to the log file:
{path, ok, why, bytes, chunks, seconds, cpu_seconds (of the thread that read it),
rss_before_kb, rss_peak_kb}.

With --pidfile, the process whose pid that file holds is measured: when an upload's header
arrives its peak RSS is reset (`5` to /proc/PID/clear_refs) and its RSS read (rss_before_kb);
when the last chunk has arrived its peak (VmHWM) is read (rss_peak_kb).

argv: --cert --key --portfile --log --id --secret [--token] [--mode] [--pidfile]"""
import argparse, hashlib, hmac, http.server, json, os, ssl, sys, threading, time, urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sigv4_botocore  # noqa: E402

STREAMING = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
EMPTY = hashlib.sha256(b"").hexdigest()
MAX_CHUNK = 8 << 20
ARGS = None
LOCK = threading.Lock()


def status_kb(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def measured_pid():
    try:
        with open(ARGS.pidfile) as f:
            return int(f.read().strip())
    except (TypeError, OSError, ValueError):
        return 0


def reset_peak(pid):
    """The process's RSS now, after its peak was reset to it (0 when not measured)."""
    if not pid:
        return 0
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")
    return status_kb(pid, "VmRSS")


def signing_key(scope):
    date, region, service = scope.split("/")[:3]
    k = ("AWS4" + ARGS.secret).encode()
    for part in (date, region, service, "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    return k


def seed(h):
    """(signature, amz_date, scope) of a request signed with the real key for a streaming body."""
    auth = h.headers.get("Authorization", "")
    if not auth.startswith("AWS4-HMAC-SHA256 "):
        raise ValueError("not signed")
    parts = dict(p.strip().split("=", 1) for p in auth[len("AWS4-HMAC-SHA256 "):].split(","))
    cred, signed = parts["Credential"].split("/"), parts["SignedHeaders"].split(";")
    if cred[0] != ARGS.id:
        raise ValueError("access key id is not the real one")
    if h.headers.get("x-amz-security-token", "") != (ARGS.token or ""):
        raise ValueError("security token is not the real one")
    if h.headers.get("x-amz-content-sha256") != STREAMING:
        raise ValueError("not a streaming upload")
    ts = h.headers.get("x-amz-date", "")
    want = sigv4_botocore.signature({
        "method": h.command, "url": "https://" + h.headers["Host"] + h.path,
        "headers": [[k, v] for k, v in h.headers.items()], "signed": signed,
        "service": cred[3], "region": cred[2], "secret": ARGS.secret, "timestamp": ts,
        "presigned": False, "payload": STREAMING})
    if not hmac.compare_digest(want, parts["Signature"]):
        raise ValueError("signature is not the real key's")
    return parts["Signature"], ts, "/".join(cred[1:])


class Chunks:
    """Reads an aws-chunked body from `rfile` one chunk at a time into one reused buffer."""

    def __init__(self, rfile, length, chain):
        self.rfile, self.left, self.chain = rfile, length, chain
        self.buf = memoryview(bytearray(MAX_CHUNK + 2))
        self.bytes = self.chunks = 0

    def read_into(self, view):
        got = 0
        while got < len(view):
            n = self.rfile.readinto(view[got:])
            if not n:
                raise ValueError("truncated body")
            got += n
        self.left -= got

    def next(self):
        """False after the last (empty) chunk."""
        line = self.rfile.readline(256)
        self.left -= len(line)
        size_text, _, sig = line.rstrip(b"\r\n").decode().partition(";chunk-signature=")
        size = int(size_text, 16)
        if size > MAX_CHUNK or len(sig) != 64:
            raise ValueError("bad chunk header")
        view = self.buf[:size + 2]
        self.read_into(view)
        if view[size:] != b"\r\n":
            raise ValueError("chunk data not followed by CRLF")
        if self.chain:
            self.chain(sig, view[:size])
        self.bytes += size
        self.chunks += 1
        return size > 0


def verifier(signature, ts, scope):
    """Checks each chunk's signature against the real key's chain from the seed `signature`."""
    key, prev = signing_key(scope), [signature]

    def check(sig, data):
        sts = "\n".join(["AWS4-HMAC-SHA256-PAYLOAD", ts, scope, prev[0], EMPTY,
                         hashlib.sha256(data).hexdigest()])
        want = hmac.new(key, sts.encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(want, sig):
            raise ValueError(f"chunk {check.n} signature is not the real key's")
        prev[0] = sig
        check.n += 1
    check.n = 0
    return check


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def upload(self):
        """The upload's result (a dict); raises ValueError when it is refused."""
        pid = measured_pid()
        result = {"path": self.path, "rss_before_kb": reset_peak(pid)}
        signature, ts, scope = seed(self)
        chain = verifier(signature, ts, scope) if ARGS.mode == "verify" else None
        chunks = Chunks(self.rfile, int(self.headers.get("Content-Length") or 0), chain)
        start, cpu = time.monotonic(), time.thread_time()
        while chunks.next():
            pass
        if chunks.left != 0:
            raise ValueError("bytes after the last chunk")
        if str(chunks.bytes) != self.headers.get("x-amz-decoded-content-length"):
            raise ValueError("decoded length is not x-amz-decoded-content-length")
        result.update(ok=True, why="", bytes=chunks.bytes, chunks=chunks.chunks,
                      seconds=time.monotonic() - start, cpu_seconds=time.thread_time() - cpu,
                      rss_peak_kb=status_kb(pid, "VmHWM") if pid else 0)
        return result

    def do_PUT(self):
        try:
            result, status = self.upload(), 200
        except (ValueError, KeyError, IndexError) as e:
            result, status = {"path": self.path, "ok": False, "why": str(e)}, 403
            self.close_connection = True
        body = json.dumps(result).encode()
        with LOCK, open(ARGS.log, "a") as f:
            f.write(body.decode() + "\n")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True


def main():
    global ARGS
    p = argparse.ArgumentParser()
    for name in ("cert", "key", "portfile", "log", "id", "secret"):
        p.add_argument("--" + name, required=True)
    p.add_argument("--token", default="")
    p.add_argument("--mode", choices=["verify", "count"], default="verify")
    p.add_argument("--pidfile")
    ARGS = p.parse_args()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(ARGS.cert, ARGS.key)
    server = Server(("127.0.0.1", 0), Handler)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    with open(ARGS.portfile + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(ARGS.portfile + ".tmp", ARGS.portfile)
    server.serve_forever()


if __name__ == "__main__":
    main()
