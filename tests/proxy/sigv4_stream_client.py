"""One aws-chunked streaming upload (STREAMING-AWS4-HMAC-SHA256-PAYLOAD) of --size bytes, made
as fast as Python can, for the streaming SigV4 test (tests/proxy/sigv4_stream_test.cpp) and
bench/sigv4_upload.sh. The request is signed by botocore's SigV4Auth; each chunk's signature
is chained by hand as the SDKs do. The data is one random MiB repeated, so each chunk's SHA-256
is computed once per distinct chunk and the client spends its time on framing, one HMAC per
chunk and TLS (the proxy and the upstream still hash every byte).

Through a proxy (--proxy HOST:PORT, default $HTTPS_PROXY) the upload goes in a CONNECT tunnel;
with --direct it goes straight to --host:--port. Credentials default to the sandbox's
AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN and the CA to $AWS_CA_BUNDLE.
--warmup BYTES first sends one small upload on its own connection. Prints one JSON line per
upload: {path, status, bytes, seconds, cpu_seconds, answer}."""
import argparse, hashlib, hmac, http.client, json, os, ssl, time, urllib.parse

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

STREAMING = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
EMPTY = hashlib.sha256(b"").hexdigest()
BLOCK = os.urandom(1 << 20)
SEND = 1 << 20  # bytes framed before each sendall


def encoded_length(size, chunk):
    full, rest = divmod(size, chunk)
    sizes = [chunk] * full + ([rest] if rest else []) + [0]
    return sum(len("%x" % n) + 17 + 64 + 2 + n + 2 for n in sizes)


def sign(a, path, size):
    url = f"https://{a.host}:{a.port}{path}"
    r = AWSRequest(method="PUT", url=url, headers={
        "Content-Encoding": "aws-chunked", "x-amz-decoded-content-length": str(size),
        "Content-Length": str(encoded_length(size, a.chunk)), "X-Amz-Content-SHA256": STREAMING})
    SigV4Auth(Credentials(a.id, a.secret, a.token or None), "s3", a.region).add_auth(r)
    return dict(r.headers.items())


def chunk_key(secret, scope):
    k = ("AWS4" + secret).encode()
    for part in scope.split("/")[:4]:
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    return k


def connect(a):
    ctx = ssl.create_default_context(cafile=a.cafile)
    if a.direct:
        return http.client.HTTPSConnection(a.host, a.port, context=ctx, timeout=120)
    proxy = urllib.parse.urlsplit(a.proxy if "//" in a.proxy else "http://" + a.proxy)
    c = http.client.HTTPSConnection(proxy.hostname, proxy.port, context=ctx, timeout=120)
    c.set_tunnel(a.host, a.port)
    return c


def body(a, headers, size):
    """The framed chunks, about SEND bytes at a time."""
    auth = dict(p.strip().split("=", 1) for p in headers["Authorization"][17:].split(","))
    scope = auth["Credential"].split("/", 1)[1]
    key, prev, ts = chunk_key(a.secret, scope), auth["Signature"], headers["X-Amz-Date"]
    slots = len(BLOCK) // a.chunk
    hashes = [hashlib.sha256(BLOCK[i * a.chunk:(i + 1) * a.chunk]).hexdigest() for i in range(slots)]
    view, out, sent, i = memoryview(BLOCK), bytearray(), 0, 0
    while True:
        n = min(a.chunk, size - sent)
        slot = i % slots
        digest = hashes[slot] if n == a.chunk else \
            hashlib.sha256(view[slot * a.chunk:slot * a.chunk + n]).hexdigest()
        sts = "\n".join(["AWS4-HMAC-SHA256-PAYLOAD", ts, scope, prev, EMPTY, digest])
        prev = hmac.new(key, sts.encode(), hashlib.sha256).hexdigest()
        out += b"%x;chunk-signature=%s\r\n" % (n, prev.encode())
        out += view[slot * a.chunk:slot * a.chunk + n]
        out += b"\r\n"
        sent, i = sent + n, i + 1
        if n == 0 or len(out) >= SEND:
            yield out
            out = bytearray()
        if n == 0:
            return


def upload(a, path, size):
    c = connect(a)
    headers = sign(a, path, size)
    wall, cpu = time.monotonic(), time.process_time()
    try:
        c.putrequest("PUT", path, skip_host=True, skip_accept_encoding=True)
        c.putheader("Host", f"{a.host}:{a.port}")
        for k, v in headers.items():
            c.putheader(k, v)
        c.endheaders()
        for part in body(a, headers, size):
            c.sock.sendall(part)
        r = c.getresponse()
        status, answer = r.status, r.read().decode("utf-8", "replace")[:2000]
    except OSError as e:  # the proxy may cut an upload off
        status, answer = 0, repr(e)
    finally:
        c.close()
    print(json.dumps({"path": path, "status": status, "bytes": size,
                      "seconds": time.monotonic() - wall,
                      "cpu_seconds": time.process_time() - cpu, "answer": answer}), flush=True)
    return status


def main():
    env = os.environ.get
    p = argparse.ArgumentParser()
    p.add_argument("--host", default="localhost")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--proxy", default=env("HTTPS_PROXY", ""))
    p.add_argument("--direct", action="store_true")
    p.add_argument("--cafile", default=env("AWS_CA_BUNDLE") or env("SSL_CERT_FILE"))
    p.add_argument("--id", default=env("AWS_ACCESS_KEY_ID"))
    p.add_argument("--secret", default=env("AWS_SECRET_ACCESS_KEY"))
    p.add_argument("--token", default=env("AWS_SESSION_TOKEN", ""))
    p.add_argument("--region", default="us-east-1")
    p.add_argument("--size", type=int, required=True)
    p.add_argument("--chunk", type=int, default=64 << 10)
    p.add_argument("--path", default="/bucket/upload.bin")
    p.add_argument("--warmup", type=int, default=0)
    a = p.parse_args()
    if a.chunk <= 0 or len(BLOCK) % a.chunk:
        p.error("--chunk must divide 1 MiB")
    if a.warmup:
        upload(a, "/bucket/warmup.bin", a.warmup)
    raise SystemExit(0 if upload(a, a.path, a.size) == 200 else 1)


if __name__ == "__main__":
    main()
