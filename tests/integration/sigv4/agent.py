"""The program sigv4_run_test runs inside `sluice run`: the aws CLI, the AWS SDK for JavaScript
and hand-made requests (botocore's signer with the sandbox's placeholder key), against the
test's S3-like upstream through the proxy. Results go to /output/results.json; the environment
and every file of /work and /tmp are copied to /output/dump for the test's leak search."""
import hashlib, hmac, http.client, json, os, socket, ssl, subprocess, sys, urllib.parse

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

port = os.environ["UPSTREAM_PORT"]
endpoint = f"https://localhost:{port}"
results = {"env": {k: os.environ.get(k, "") for k in
                   ["AWS_ACCESS_KEY_ID", "AWS_CA_BUNDLE", "SSL_CERT_FILE"]},
           "has_secret_var": bool(os.environ.get("AWS_SECRET_ACCESS_KEY")),
           "has_token_var": bool(os.environ.get("AWS_SESSION_TOKEN"))}
os.makedirs("/work/.aws", exist_ok=True)
with open("/work/.aws/config", "w") as f:
    f.write("[default]\nregion = us-east-1\ns3 =\n    addressing_style = path\n")


def run(name, *argv, env=None):
    p = subprocess.run(list(argv), capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, **(env or {})))
    results[name] = {"rc": p.returncode, "out": p.stdout[-4000:], "err": p.stderr[-4000:]}
    return p


def aws(name, *args, env=None):
    return run(name, "aws", "--endpoint-url", endpoint, *args, env=env)


with open("/work/small.txt", "w") as f:
    f.write("hello from the sandbox\n")
with open("/work/big.bin", "wb") as f:
    f.write(os.urandom(6 << 20))
aws("put_small", "s3", "cp", "/work/small.txt", "s3://bucket/small.txt")
aws("put_big", "s3", "cp", "/work/big.bin", "s3://bucket/big.bin")
aws("ls", "s3", "ls", "s3://bucket/")
aws("get", "s3", "cp", "s3://bucket/small.txt", "/work/got.txt")
results["get_same"] = os.path.exists("/work/got.txt") and \
    open("/work/got.txt").read() == open("/work/small.txt").read()
aws("get_big", "s3", "cp", "s3://bucket/big.bin", "/work/got.bin")
results["get_big_same"] = os.path.exists("/work/got.bin") and \
    open("/work/got.bin", "rb").read() == open("/work/big.bin", "rb").read()
p = aws("presign", "s3", "presign", "s3://bucket/small.txt")
run("presigned_get", "curl", "-sS", "--max-time", "30", "-w", "\n%{http_code}", p.stdout.strip())
aws("wrong_key", "s3", "ls", "s3://wrongbucket/",
    env={"AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"})
run("node", "node", "/input/s3sdk.mjs", endpoint)
# Another service: STS signs its form body's hash without stating it (the proxy reads it ahead).
aws("sts", "sts", "get-caller-identity", "--region", "us-east-1")

# Hand-made requests: botocore signs with the placeholder key (or a wrong one).
ctx = ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])


def connect():
    c = http.client.HTTPSConnection("127.0.0.1", 3128, context=ctx, timeout=60)
    c.set_tunnel("localhost", int(port))
    return c


def signed(method, path, secret, headers=None, payload=None):
    r = AWSRequest(method=method, url=endpoint + path, headers=headers or {})
    r.headers["X-Amz-Content-SHA256"] = payload or hashlib.sha256(b"").hexdigest()
    creds = Credentials(os.environ["AWS_ACCESS_KEY_ID"], secret,
                        os.environ.get("AWS_SESSION_TOKEN"))
    SigV4Auth(creds, "s3", "us-east-1").add_auth(r)
    return dict(r.headers.items())


def send(conn, method, path, headers, body=b""):
    try:
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        conn.putheader("Host", f"localhost:{port}")
        for k, v in headers.items():
            conn.putheader(k, v)
        conn.endheaders()
        if body:
            conn.send(body)
        r = conn.getresponse()
        return {"status": r.status, "reason": r.getheader("X-Sluice-Reason", ""),
                "body": r.read().decode("utf-8", "replace")[:2000]}
    except Exception as e:  # the proxy may close mid-upload
        return {"status": 0, "error": repr(e)}


good = os.environ["AWS_SECRET_ACCESS_KEY"]
wrong = "x" * 40
c = connect()
results["keepalive_good"] = send(c, "GET", "/bucket?list-type=2", signed("GET", "/bucket?list-type=2", good))
results["keepalive_wrong"] = send(c, "GET", "/wrongbucket?list-type=2",
                                  signed("GET", "/wrongbucket?list-type=2", wrong))
results["fresh_wrong"] = send(connect(), "GET", "/wrongbucket?list-type=2",
                              signed("GET", "/wrongbucket?list-type=2", wrong))


def pipelined(reqs):
    """Several requests written at once on one tunnel; everything the proxy answers."""
    s = socket.create_connection(("127.0.0.1", 3128), timeout=60)
    s.sendall(f"CONNECT localhost:{port} HTTP/1.1\r\nHost: localhost:{port}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(4096)
    t = ctx.wrap_socket(s, server_hostname="localhost")
    raw = b""
    for method, path, headers in reqs:
        raw += f"{method} {path} HTTP/1.1\r\nHost: localhost:{port}\r\n".encode()
        raw += b"".join(f"{k}: {v}\r\n".encode() for k, v in headers.items()) + b"\r\n"
    t.sendall(raw)
    data = b""
    try:
        while chunk := t.recv(65536):
            data += chunk
    except OSError:
        pass
    return data.decode("latin-1")


list_path = "/bucket?list-type=2&prefix=pipe"
results["pipelined"] = pipelined([
    ("GET", list_path, signed("GET", list_path, good)),
    ("GET", "/wrongbucket?list-type=2", signed("GET", "/wrongbucket?list-type=2", wrong)),
    ("GET", list_path, signed("GET", list_path, good))])


def hm(k, m):
    return hmac.new(k, m.encode(), hashlib.sha256).digest()


def streaming(path, data, chunk, tamper=False):
    """An aws-chunked upload whose chunks are signed with the placeholder key."""
    sizes = [min(chunk, len(data) - i) for i in range(0, len(data), chunk)] + [0]
    enc_len = sum(len("%x" % n) + 17 + 64 + 2 + n + 2 for n in sizes)
    h = signed("PUT", path, good, {"Content-Encoding": "aws-chunked",
                                   "x-amz-decoded-content-length": str(len(data)),
                                   "Content-Length": str(enc_len)},
               payload="STREAMING-AWS4-HMAC-SHA256-PAYLOAD")
    auth = dict(p.strip().split("=", 1) for p in h["Authorization"][17:].split(","))
    scope = auth["Credential"].split("/", 1)[1]
    date, region, service = scope.split("/")[:3]
    k = hm(hm(hm(hm(("AWS4" + good).encode(), date), region), service), "aws4_request")
    prev, body, pos = auth["Signature"], bytearray(), 0
    for n in sizes:
        part = data[pos:pos + n]
        pos += n
        sts = "\n".join(["AWS4-HMAC-SHA256-PAYLOAD", h["X-Amz-Date"], scope, prev,
                         hashlib.sha256(b"").hexdigest(), hashlib.sha256(part).hexdigest()])
        prev = hmac.new(k, sts.encode(), hashlib.sha256).hexdigest()
        body += b"%x;chunk-signature=%s\r\n" % (n, prev.encode()) + part + b"\r\n"
    assert len(body) == enc_len
    if tamper:
        body[len(body) // 2] ^= 1
    return send(connect(), "PUT", path, h, bytes(body))


# Larger than the proxy's default request-body limit (64 MiB): the policy's max_bytes_out is
# what bounds a streamed upload, and the proxy re-signs it chunk by chunk in constant memory.
stream_data = os.urandom(72 << 20)
results["stream_put"] = streaming("/bucket/stream.bin", stream_data, 64 << 10)
results["stream_sha256"] = hashlib.sha256(stream_data).hexdigest()
results["stream_tampered"] = streaming("/bucket/tampered.bin", os.urandom(1 << 20), 64 << 10,
                                       tamper=True)

os.makedirs("/output/dump", exist_ok=True)
n = 0
for p in ["/proc/self/environ", "/proc/self/cmdline"]:
    with open(p, "rb") as src, open("/output/dump/" + p.replace("/", "_"), "wb") as dst:
        dst.write(src.read())
for root in ["/work", "/tmp"]:
    for d, _, names in os.walk(root):
        for name in names:
            p = os.path.join(d, name)
            if os.path.isfile(p) and not os.path.islink(p) and os.path.getsize(p) < (1 << 20):
                with open(p, "rb") as src, open("/output/dump/file" + p.replace("/", "_"), "wb") as dst:
                    dst.write(src.read())
                n += 1
results["dumped_files"] = n
with open("/output/results.json", "w") as f:
    json.dump(results, f, indent=1)
