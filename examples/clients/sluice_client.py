#!/usr/bin/env python3
"""A client for the `sluice serve` API, using only Python's standard library.

The API is schemas/api.v1.yaml; the guide is docs/serve.md. Copy this file into your project.

    from sluice_client import Client, SluiceError

    c = Client()                                         # unix:/run/sluice/sluice.sock
    c = Client("http://127.0.0.1:8750", token="...")     # a TCP listener with --token-file

    r = c.run("data-analysis", ["python3", "/work/a.py"], files={"/work/a.py": b"print(1)"})
    print(r["exit"]["status"], r["stdout"]["text"])

    for event in c.stream_run("data-analysis", ["sh", "-c", "echo hi; sleep 1; echo bye"]):
        print(event)                                     # stdout/stderr/network..., receipt last

    s = c.create_session("data-analysis", idle_timeout="10m")
    c.put_file(s["id"], "/work/main.py", b"open('/output/x.txt', 'w').write('x')")
    c.exec(s["id"], ["python3", "main.py"])
    c.get_file(s["id"], "/output")                       # a directory: a list of entries
    c.get_file(s["id"], "/output/x.txt")                 # a file: its bytes
    summary = c.delete_session(s["id"])

Errors of the API raise SluiceError (.status, .reason, .message, .detail). A receipt is
returned whatever the program did: check receipt["exit"]["status"] (124: a limit stopped it,
125: sluice could not set up, 126/127: the command cannot run / does not exist).

Run as a script, it is a demo: it creates a session, uploads a Python script, runs it, downloads
/output and deletes the session.

    python3 sluice_client.py [--connect unix:PATH | http://HOST:PORT] [--token-file FILE]
                             [--workflow NAME] [--out DIR] [--stream]

SLUICE_URL and SLUICE_TOKEN give the defaults of --connect and the token.
"""
import argparse
import base64
import http.client
import json
import os
import socket
import sys
import urllib.parse

DEFAULT_SOCKET = "/run/sluice/sluice.sock"


class SluiceError(Exception):
    """An error answer of the API: {"error", "reason", "detail"} and its HTTP status."""

    def __init__(self, status, reason, message, detail=None):
        super().__init__(f"{status} {reason}: {message}" + (f" ({detail})" if detail else ""))
        self.status = status
        self.reason = reason
        self.message = message
        self.detail = detail


class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP over a Unix stream socket. The server identifies us by our uid (SO_PEERCRED)."""

    def __init__(self, path, timeout=None):
        # The host name only fills the Host header; sluice ignores it.
        super().__init__("sluice", timeout=timeout)
        self.socket_path = path

    def connect(self):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self.socket_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def _sandbox_url_path(path):
    """'/work/data dir/a.csv' -> 'work/data%20dir/a.csv' (each segment encoded on its own)."""
    if not path.startswith("/"):
        raise ValueError(f"sandbox paths are absolute (/work, /tmp, /output): {path!r}")
    segments = path.strip("/").split("/")
    return "/".join(urllib.parse.quote(seg, safe="") for seg in segments)


def _b64(data):
    if isinstance(data, str):
        data = data.encode()
    return base64.b64encode(data).decode("ascii")


def _drop_none(d):
    return {k: v for k, v in d.items() if v is not None}


class Client:
    """One `sluice serve` endpoint. Each call opens its own connection, so a Client may be
    shared by threads.

    target: "unix:/path/to.sock", "http://HOST:PORT" or "https://HOST:PORT"; default
    $SLUICE_URL, else unix:/run/sluice/sluice.sock. token: the bearer token for TCP listeners;
    default $SLUICE_TOKEN. timeout: seconds for connecting and for every call except runs and
    execs, which wait as long as the workflow's own timeout lets the program run.
    """

    def __init__(self, target=None, token=None, timeout=30.0):
        self.target = target or os.environ.get("SLUICE_URL") or "unix:" + DEFAULT_SOCKET
        self.token = token if token is not None else os.environ.get("SLUICE_TOKEN")
        self.timeout = timeout
        if self.target.startswith("unix:"):
            self._socket_path = self.target[len("unix:"):]
            self._url = None
        else:
            self._socket_path = None
            self._url = urllib.parse.urlsplit(self.target)
            if self._url.scheme not in ("http", "https") or not self._url.hostname:
                raise ValueError(f"target must be unix:PATH or http(s)://HOST:PORT: {target!r}")

    # ---- transport -------------------------------------------------------------------------

    def _connect(self):
        if self._socket_path is not None:
            return UnixHTTPConnection(self._socket_path, timeout=self.timeout)
        cls = (http.client.HTTPSConnection if self._url.scheme == "https"
               else http.client.HTTPConnection)
        return cls(self._url.hostname, self._url.port, timeout=self.timeout)

    def _request(self, method, path, body=None, content_type=None, accept="application/json",
                 wait=False):
        """Sends one request; returns the open response (status < 400) or raises SluiceError.
        wait: the call runs a program, so reading its answer may take as long as that."""
        headers = {"Accept": accept}
        if self.token and self._socket_path is None:
            headers["Authorization"] = "Bearer " + self.token
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        conn = self._connect()
        try:
            conn.connect()
            if wait:
                conn.sock.settimeout(None)
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
        except BaseException:
            conn.close()
            raise
        if resp.status >= 400:
            raw = resp.read()
            conn.close()
            try:
                err = json.loads(raw)
            except ValueError:
                err = {}
            if not isinstance(err, dict):
                err = {}
            raise SluiceError(resp.status, err.get("reason", "unknown"),
                              err.get("error", raw.decode("utf-8", "replace").strip()),
                              err.get("detail"))
        resp.connection_to_close = conn  # closed by the caller's _read / _lines
        return resp

    @staticmethod
    def _read(resp):
        try:
            return resp.read()
        finally:
            resp.connection_to_close.close()

    def _json(self, method, path, payload=None, wait=False):
        body = None if payload is None else json.dumps(payload).encode()
        resp = self._request(method, path, body, wait=wait)
        return json.loads(self._read(resp))

    def _lines(self, method, path, payload):
        """The NDJSON events of a streamed run or exec, as they arrive."""
        resp = self._request(method, path, json.dumps(payload).encode(),
                             accept="application/x-ndjson", wait=True)
        try:
            if not resp.getheader("Content-Type", "").startswith("application/x-ndjson"):
                # A server that does not stream answers the receipt whole.
                yield {"type": "receipt", "receipt": json.loads(resp.read())}
                return
            for line in resp:  # http.client undoes the chunked framing
                line = line.strip()
                if line:
                    yield json.loads(line)
        finally:
            resp.connection_to_close.close()

    # ---- the API -----------------------------------------------------------------------------

    def healthz(self):
        """{"status": "ok", "version": ...}; SluiceError 503 `draining` during shutdown."""
        return self._json("GET", "/v1/healthz")

    def workflows(self):
        """[{"name", "description", "policy_sha256"}, ...]"""
        return self._json("GET", "/v1/workflows")

    @staticmethod
    def _run_payload(workflow, argv, stdin, env, files, limits):
        return _drop_none({
            "workflow": workflow,
            "argv": list(argv),
            "stdin": stdin,
            "env": env,
            # {"/work/a.py": bytes or str} -> base64
            "files": None if files is None else {p: _b64(d) for p, d in files.items()},
            "limits": limits,
        })

    def run(self, workflow, argv, stdin=None, env=None, files=None, limits=None):
        """Runs argv in a fresh sandbox; returns the receipt (dict).

        files: {"/work/a.py": bytes or str} written before the program starts.
        limits: overrides that may only tighten, e.g. {"timeout": "10s", "memory": "256MiB"}.
        """
        payload = self._run_payload(workflow, argv, stdin, env, files, limits)
        return self._json("POST", "/v1/runs", payload, wait=True)

    def stream_run(self, workflow, argv, stdin=None, env=None, files=None, limits=None):
        """As run(), but yields the events as they happen: {"type": "stdout"|"stderr", "data"},
        {"type": "network", ...}, {"type": "approval", ...}, and last {"type": "receipt",
        "receipt": {...}} (or {"type": "error", ...} if sluice itself failed)."""
        payload = self._run_payload(workflow, argv, stdin, env, files, limits)
        return self._lines("POST", "/v1/runs", payload)

    def create_session(self, workflow, idle_timeout=None, ttl=None):
        """{"id", "workflow", "created_at", "expires_at"}. Defaults: idle 5m, ttl 1h."""
        return self._json("POST", "/v1/sessions",
                          _drop_none({"workflow": workflow, "idle_timeout": idle_timeout,
                                      "ttl": ttl}))

    @staticmethod
    def _exec_payload(argv, stdin, env, cwd, timeout):
        return _drop_none({"argv": list(argv), "stdin": stdin, "env": env, "cwd": cwd,
                           "timeout": timeout})

    def exec(self, session_id, argv, stdin=None, env=None, cwd=None, timeout=None):
        """Runs argv in the session's sandbox (cwd default /work); returns the receipt."""
        return self._json("POST", f"/v1/sessions/{urllib.parse.quote(session_id, safe='')}/exec",
                          self._exec_payload(argv, stdin, env, cwd, timeout), wait=True)

    def stream_exec(self, session_id, argv, stdin=None, env=None, cwd=None, timeout=None):
        """As exec(), streaming events like stream_run()."""
        return self._lines("POST",
                           f"/v1/sessions/{urllib.parse.quote(session_id, safe='')}/exec",
                           self._exec_payload(argv, stdin, env, cwd, timeout))

    def _file_path(self, session_id, path):
        return (f"/v1/sessions/{urllib.parse.quote(session_id, safe='')}/files/"
                f"{_sandbox_url_path(path)}")

    def put_file(self, session_id, path, data):
        """Writes bytes (or str, as UTF-8) to an absolute sandbox path under /work, /tmp or
        /output; returns {"path", "bytes", "sha256"}."""
        if isinstance(data, str):
            data = data.encode()
        resp = self._request("PUT", self._file_path(session_id, path), data,
                             content_type="application/octet-stream")
        return json.loads(self._read(resp))

    def get_file(self, session_id, path):
        """A file: its bytes. A directory: a list of {"name", "type", "bytes"}."""
        resp = self._request("GET", self._file_path(session_id, path), accept="*/*")
        is_listing = resp.getheader("Content-Type", "").startswith("application/json")
        data = self._read(resp)
        return json.loads(data) if is_listing else data

    def download(self, session_id, path, dest):
        """Copies the sandbox directory `path` (e.g. "/output") into the local directory
        `dest`; returns the local paths written. Links and special files are skipped."""
        written = []
        os.makedirs(dest, exist_ok=True)
        for entry in self.get_file(session_id, path):
            name = entry["name"]
            if name in (".", "..") or "/" in name:
                continue  # never let a listing name a path outside dest
            remote, local = path.rstrip("/") + "/" + name, os.path.join(dest, name)
            if entry["type"] == "directory":
                written += self.download(session_id, remote, local)
            elif entry["type"] == "file":
                with open(local, "wb") as f:
                    f.write(self.get_file(session_id, remote))
                written.append(local)
        return written

    def delete_session(self, session_id):
        """Ends the session; returns its summary {"session_id", "workflow", "caller", "execs",
        "artifacts", "network", "ended_by"}. Download what you need first."""
        return self._json("DELETE", f"/v1/sessions/{urllib.parse.quote(session_id, safe='')}")

    def get_execution(self, execution_id):
        """The stored receipt of one of this caller's executions."""
        return self._json("GET", f"/v1/executions/{urllib.parse.quote(execution_id, safe='')}")

    def approvals(self):
        """Pending approvals (approvers only; others get SluiceError 403)."""
        return self._json("GET", "/v1/approvals")

    def decide_approval(self, approval_id, decision, scope="once"):
        """decision: "allow" or "deny"; scope: "once" or "execution"."""
        return self._json("POST", f"/v1/approvals/{urllib.parse.quote(approval_id, safe='')}",
                          {"decision": decision, "scope": scope})

    def metrics(self):
        """The Prometheus text exposition (root, approvers and `metrics` tokens only; else 403)."""
        resp = self._request("GET", "/metrics", accept="text/plain")
        return self._read(resp).decode()


# ---- demo --------------------------------------------------------------------------------------

DEMO_SCRIPT = r'''
import json, os, platform, statistics

values = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]
result = {"n": len(values), "mean": statistics.mean(values), "median": statistics.median(values),
          "python": platform.python_version(), "uid": os.getuid()}
os.makedirs("/output/details", exist_ok=True)
with open("/output/result.json", "w") as f:
    json.dump(result, f, indent=2)
with open("/output/details/values.txt", "w") as f:
    f.write("\n".join(map(str, values)) + "\n")
print("mean", result["mean"], "median", result["median"])
'''


def _demo(argv):
    ap = argparse.ArgumentParser(description="sluice serve demo: session, upload, exec, "
                                             "download /output, delete.")
    ap.add_argument("--connect", default=None,
                    help="unix:PATH or http(s)://HOST:PORT (default $SLUICE_URL, else "
                         f"unix:{DEFAULT_SOCKET})")
    ap.add_argument("--token-file", help="a file holding the bearer token (TCP listeners); "
                                         "default $SLUICE_TOKEN")
    ap.add_argument("--workflow", default="data-analysis")
    ap.add_argument("--out", default="sluice-output", help="where /output is downloaded")
    ap.add_argument("--stream", action="store_true", help="stream the exec's output (NDJSON)")
    args = ap.parse_args(argv)

    token = None
    if args.token_file:
        with open(args.token_file, encoding="utf-8") as f:
            token = f.read().strip()
    c = Client(args.connect, token=token)
    print(f"server: sluice {c.healthz()['version']} at {c.target}")

    session = c.create_session(args.workflow, idle_timeout="2m", ttl="10m")
    sid = session["id"]
    print(f"session {sid} ({session['workflow']}), expires {session['expires_at']}")
    try:
        written = c.put_file(sid, "/work/analyse.py", DEMO_SCRIPT)
        print(f"uploaded {written['path']} ({written['bytes']} bytes, sha256 "
              f"{written['sha256'][:12]}...)")

        if args.stream:
            receipt = None
            for event in c.stream_exec(sid, ["python3", "analyse.py"], timeout="60s"):
                if event["type"] in ("stdout", "stderr"):
                    print(f"[{event['type']}] {event['data']}", end="")
                elif event["type"] == "network":
                    print(f"[network] {event['decision']} {event['host']}:{event['port']} "
                          f"({event['reason']})")
                elif event["type"] == "receipt":
                    receipt = event["receipt"]
                elif event["type"] == "error":
                    raise SluiceError(500, event["reason"], event["error"], event.get("detail"))
            if receipt is None:
                raise SluiceError(0, "stream_cut", "the stream ended without a receipt")
        else:
            receipt = c.exec(sid, ["python3", "analyse.py"], timeout="60s")
            print(receipt["stdout"]["text"], end="")
            if receipt["stderr"]["text"]:
                print(receipt["stderr"]["text"], end="", file=sys.stderr)
        print(f"exec {receipt['execution_id']}: exit status {receipt['exit']['status']}, "
              f"limit hit {receipt['limit_hit']}, {receipt['duration_ms']} ms")

        for path in c.download(sid, "/output", args.out):
            print(f"downloaded {path}")
    finally:
        try:
            summary = c.delete_session(sid)
            print(f"session ended by {summary['ended_by']}: {len(summary['execs'])} exec(s), "
                  f"{len(summary['artifacts'])} artifact(s), network allowed "
                  f"{summary['network']['allowed']} denied {summary['network']['denied']}")
        except (SluiceError, OSError) as e:  # keep the first error, if there was one
            print(f"sluice_client: deleting session {sid}: {e}", file=sys.stderr)
    return receipt["exit"]["status"]


if __name__ == "__main__":
    try:
        sys.exit(_demo(sys.argv[1:]))
    except SluiceError as e:
        print(f"sluice_client: {e}", file=sys.stderr)
        sys.exit(1)
    except OSError as e:
        print(f"sluice_client: cannot reach the server: {e}", file=sys.stderr)
        sys.exit(1)
