"""An S3-like HTTPS upstream on 127.0.0.1 for sigv4_run_test: every request's SigV4 signature is
checked with botocore's own signer (tests/proxy/sigv4_botocore.py) and the REAL key; a streaming
upload's chunk signatures are checked with the real key's chain. Objects live in memory; list,
put, head and get are answered as S3 does (XML). Each request is logged as a JSON line:
{method, path, ok, why, streaming, size}.

argv: cert key portfile logfile helper_dir real_id real_secret real_token"""
import hashlib, hmac, http.server, json, socket, ssl, sys, threading, urllib.parse, os

cert, key, portfile, logfile, helper_dir, REAL_ID, REAL_SECRET, REAL_TOKEN = sys.argv[1:9]
sys.path.insert(0, helper_dir)
import sigv4_botocore  # noqa: E402

EMPTY = hashlib.sha256(b"").hexdigest()
objects = {}
lock = threading.Lock()


def hm(k, m):
    return hmac.new(k, m.encode(), hashlib.sha256).digest()


def decode_chunks(body, seed, ts, scope):
    """The data of an aws-chunked body whose chunk signatures chain from `seed` (real key)."""
    date, region, service = scope.split("/")[:3]
    k = hm(hm(hm(hm(("AWS4" + REAL_SECRET).encode(), date), region), service), "aws4_request")
    prev, out, pos = seed, [], 0  # joined once at the end: += would copy the body per chunk
    while True:
        end = body.index(b"\r\n", pos)
        size_text, sig = body[pos:end].decode().split(";chunk-signature=")
        size = int(size_text, 16)
        data = body[end + 2:end + 2 + size]
        if len(data) != size or body[end + 2 + size:end + 4 + size] != b"\r\n":
            raise ValueError("truncated chunk")
        sts = "\n".join(["AWS4-HMAC-SHA256-PAYLOAD", ts, scope, prev, EMPTY,
                         hashlib.sha256(data).hexdigest()])
        want = hmac.new(k, sts.encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(want, sig):
            raise ValueError("chunk signature is not the real key's")
        prev, pos = sig, end + 4 + size
        out.append(data)
        if size == 0:
            return b"".join(out)


def check(h, body):
    """(ok, why, data): the signature made with the real key, and the object's bytes."""
    url = urllib.parse.urlsplit(h.path)
    q = urllib.parse.parse_qs(url.query, keep_blank_values=True)
    if "X-Amz-Signature" in q:
        cred = q["X-Amz-Credential"][0].split("/")
        signed, ts = q["X-Amz-SignedHeaders"][0].split(";"), q["X-Amz-Date"][0]
        given, presigned, payload = q["X-Amz-Signature"][0], True, "UNSIGNED-PAYLOAD"
        token = q.get("X-Amz-Security-Token", [""])[0]
    else:
        auth = h.headers.get("Authorization", "")
        if not auth.startswith("AWS4-HMAC-SHA256 "):
            return False, "not signed", body
        parts = dict(p.strip().split("=", 1) for p in auth[len("AWS4-HMAC-SHA256 "):].split(","))
        cred, signed = parts["Credential"].split("/"), parts["SignedHeaders"].split(";")
        given, presigned, ts = parts["Signature"], False, h.headers.get("x-amz-date", "")
        # Services other than S3 sign the body's hash without stating it.
        payload = h.headers.get("x-amz-content-sha256") or hashlib.sha256(body).hexdigest()
        token = h.headers.get("x-amz-security-token", "")
    if cred[0] != REAL_ID:
        return False, "access key id is not the real one", body
    if token != REAL_TOKEN:
        return False, "security token is not the real one", body
    want = sigv4_botocore.signature({
        "method": h.command, "url": "https://" + h.headers["Host"] + h.path,
        "headers": [[k, v] for k, v in h.headers.items()], "signed": signed,
        "service": cred[3], "region": cred[2], "secret": REAL_SECRET, "timestamp": ts,
        "presigned": presigned, "payload": payload})
    if not hmac.compare_digest(want, given):
        return False, "signature is not the real key's", body
    if payload and len(payload) == 64 and payload != hashlib.sha256(body).hexdigest():
        return False, "body does not match x-amz-content-sha256", body
    if payload == "STREAMING-AWS4-HMAC-SHA256-PAYLOAD":
        try:
            body = decode_chunks(body, given, ts, "/".join(cred[1:]))
        except ValueError as e:
            return False, str(e), body
    return True, "", body


STS_IDENTITY = (b'<GetCallerIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">'
                b"<GetCallerIdentityResult><Arn>arn:aws:iam::123456789012:user/sigv4-test</Arn>"
                b"<UserId>AIDASIGV4TEST</UserId><Account>123456789012</Account>"
                b"</GetCallerIdentityResult><ResponseMetadata><RequestId>1</RequestId>"
                b"</ResponseMetadata></GetCallerIdentityResponse>")


def listing(bucket):
    items = "".join(
        f"<Contents><Key>{k}</Key><LastModified>2026-01-01T00:00:00.000Z</LastModified>"
        f"<ETag>&quot;{hashlib.md5(v).hexdigest()}&quot;</ETag><Size>{len(v)}</Size>"
        f"<StorageClass>STANDARD</StorageClass></Contents>"
        for (b, k), v in sorted(objects.items()) if b == bucket)
    count = sum(1 for (b, _) in objects if b == bucket)
    return ('<?xml version="1.0" encoding="UTF-8"?>'
            '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
            f"<Name>{bucket}</Name><Prefix></Prefix><KeyCount>{count}</KeyCount>"
            f"<MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated>{items}"
            "</ListBucketResult>").encode()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def read_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while True:
                n = int(self.rfile.readline().split(b";")[0], 16)
                if n == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return data, True
                data += self.rfile.read(n)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        data = self.rfile.read(n) if n else b""
        return data, len(data) == n

    def answer(self, status, body=b"", headers=(), head=False):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def handle_any(self):
        body, complete = self.read_body()
        ok, why, data = check(self, body) if complete else (False, "truncated body", body)
        streaming = self.headers.get("x-amz-content-sha256") == "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
        with lock, open(logfile, "a") as f:
            f.write(json.dumps({"method": self.command, "path": self.path, "ok": ok, "why": why,
                                "streaming": streaming, "size": len(data)}) + "\n")
        if not complete:
            self.close_connection = True
            return
        if not ok:
            return self.answer(403, b"<Error><Code>SignatureDoesNotMatch</Code></Error>")
        path = urllib.parse.urlsplit(self.path).path
        if self.command == "POST" and path == "/" and b"Action=GetCallerIdentity" in data:
            return self.answer(200, STS_IDENTITY, [("Content-Type", "text/xml")])
        bucket, _, name = path.lstrip("/").partition("/")
        name = urllib.parse.unquote(name)
        if self.command == "PUT":
            with lock:
                objects[(bucket, name)] = data
            return self.answer(200, headers=[("ETag", '"%s"' % hashlib.md5(data).hexdigest())])
        if not name:
            return self.answer(200, listing(bucket), [("Content-Type", "application/xml")])
        with lock:
            obj = objects.get((bucket, name))
        if obj is None:
            return self.answer(404, b"<Error><Code>NoSuchKey</Code></Error>",
                               head=self.command == "HEAD")
        return self.answer(200, obj, [("ETag", '"%s"' % hashlib.md5(obj).hexdigest()),
                                      ("Last-Modified", "Thu, 01 Jan 2026 00:00:00 GMT"),
                                      ("Content-Type", "application/octet-stream")],
                           head=self.command == "HEAD")

    do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = handle_any


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True


ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
server = Server(("127.0.0.1", 0), Handler)
server.socket = ctx.wrap_socket(server.socket, server_side=True)
with open(portfile + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(portfile + ".tmp", portfile)
server.serve_forever()
