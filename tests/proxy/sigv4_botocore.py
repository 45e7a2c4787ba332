"""SigV4 signatures computed by botocore's own signer (Debian's python3-botocore), for the tests
of the proxy's SigV4 re-signing: the unit test (sigv4_test) asks it over stdin/stdout, the
end-to-end upstream (tests/integration/sigv4_run_test.cpp) imports it to check what it
received with the real key.

signature(req): req is a dict {method, url, headers: [[name, value], ...], signed: [names],
service, region, secret, timestamp, payload?}; returns the hex signature botocore computes over
exactly the signed headers (Authorization or presigned-query style: `presigned: true` leaves
X-Amz-Signature out of the canonical query)."""
import json
import sys
from urllib.parse import urlsplit, urlunsplit

from botocore.auth import S3SigV4Auth, SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials


def signature(req):
    url = req["url"]
    if req.get("presigned"):
        parts = urlsplit(url)
        query = "&".join(p for p in parts.query.split("&") if not p.startswith("X-Amz-Signature="))
        url = urlunsplit(parts._replace(query=query))
    signed = set(h.lower() for h in req["signed"])
    r = AWSRequest(method=req["method"], url=url)
    for name, value in req["headers"]:
        if name.lower() in signed:
            r.headers[name] = value
    r.context["timestamp"] = req["timestamp"]
    cls = S3SigV4Auth if req["service"] == "s3" else SigV4Auth
    auth = cls(Credentials("unused", req["secret"]), req["service"], req["region"])
    cr = [r.method.upper(), auth._normalize_url_path(urlsplit(r.url).path),
          auth.canonical_query_string(r)]
    headers = auth.headers_to_sign(r)
    cr.append(auth.canonical_headers(headers) + "\n")
    cr.append(auth.signed_headers(headers))
    cr.append(req.get("payload") or r.headers.get("X-Amz-Content-SHA256") or
              "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
    canonical = "\n".join(cr)
    return auth.signature(auth.string_to_sign(r, canonical), r)


if __name__ == "__main__":
    for line in sys.stdin:
        if line.strip():
            print(signature(json.loads(line)), flush=True)
