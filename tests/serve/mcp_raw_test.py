#!/usr/bin/env python3
"""`sluice mcp` driven with raw JSON-RPC lines: the real binary as a subprocess on pipes.

Covers initialize (version negotiation), tools/list against schemas/mcp.tools.v1.json, every
JSON-RPC error object (-32700, -32600, -32601, -32602), tool results and tool errors (isError),
the sandbox's file boundary (`..`, symlinks out, paths outside /work /tmp /output), a 100 MiB
line, 5,000 pipelined pings, and the end of a connection: EOF and SIGTERM both leave the
session's summary receipt in the audit store and no process or cgroup behind.

Usage: mcp_raw_test.py SLUICE_BINARY SOURCE_DIR [TEST_NAME...]
Exit 0 all passed, 1 a failure, 77 skipped (no sandbox; a failure when CI=true or
SLUICE_REQUIRE_ISOLATION=1).
"""
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback

import jsonschema

SLUICE = sys.argv[1]
SOURCE = sys.argv[2]
ONLY = sys.argv[3:]
TOOLS_FILE = os.path.join(SOURCE, "schemas", "mcp.tools.v1.json")
RECEIPT_SCHEMA = os.path.join(SOURCE, "schemas", "receipt.v1.schema.json")
WAIT = 60  # seconds any single answer may take before the test gives up on it

WORKFLOW = """apiVersion: sluice/v1
kind: Workflow
name: shell
description: tools for the MCP tests
sandbox:
  timeout: 60s
  memory: 256MiB
  network: none
"""


def isolation_required():
    return os.environ.get("CI") == "true" or os.environ.get("SLUICE_REQUIRE_ISOLATION") == "1"


class Server:
    """One `sluice mcp` process and a line-oriented view of its stdout."""

    def __init__(self, tmp, workflow="shell", extra=()):
        self.tmp = tmp
        self.db = os.path.join(tmp, "audit.db")
        self.proc = subprocess.Popen(
            [SLUICE, "mcp", "--policy-dir", os.path.join(tmp, "policies"), "--workflow", workflow,
             "--audit", self.db, *extra],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(os.path.join(tmp, "stderr"), "wb"))
        self.buf = b""
        self.next_id = 1000

    def send_raw(self, data: bytes):
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, msg):
        self.send_raw(json.dumps(msg).encode() + b"\n")

    def line(self, timeout=WAIT):
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("no answer from sluice mcp within %ss" % timeout)
            r, _, _ = select.select([self.proc.stdout], [], [], left)
            if r:
                chunk = os.read(self.proc.stdout.fileno(), 1 << 20)
                if not chunk:
                    raise AssertionError("sluice mcp closed its output; stderr:\n" + self.stderr())
                self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def request(self, method, params=None):
        self.next_id += 1
        msg = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)
        got = self.line()
        assert got.get("id") == self.next_id, got
        return got

    def call(self, tool, arguments):
        got = self.request("tools/call", {"name": tool, "arguments": arguments})
        assert "result" in got, got
        return got["result"]

    def initialize(self, version="2025-06-18", capabilities=None):
        got = self.request("initialize", {"protocolVersion": version, "capabilities": capabilities or {},
                                          "clientInfo": {"name": "raw-test", "version": "1"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return got

    def close_and_wait(self):
        self.proc.stdin.close()
        return self.proc.wait(timeout=WAIT)

    def stderr(self):
        with open(os.path.join(self.tmp, "stderr"), "rb") as f:
            return f.read().decode(errors="replace")

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def sql(db, statement):
    out = subprocess.run([SLUICE, "audit", "sql", "--db", db, "--format", "json", statement],
                         capture_output=True, text=True, timeout=WAIT)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def tools_published():
    with open(TOOLS_FILE) as f:
        return {t["name"]: t for t in json.load(f)["tools"]}


def check_output(tool, result):
    """A successful result: text content, and structuredContent valid against the outputSchema."""
    assert result["isError"] is False, result
    assert result["content"] and result["content"][0]["type"] == "text", result
    jsonschema.validate(result["structuredContent"], tools_published()[tool]["outputSchema"])
    if tool == "run_command":
        # The receipt in full: receipt.v1 (with caller and session_id).
        with open(RECEIPT_SCHEMA) as f:
            jsonschema.validate(result["structuredContent"], json.load(f))
    return result["structuredContent"]


def check_error(result, *words):
    assert result["isError"] is True, result
    assert "structuredContent" not in result, result
    text = result["content"][0]["text"]
    for w in words:
        assert w in text, (w, text)
    return text


def sluice_cgroups():
    names = []
    for h in ("/sys/fs/cgroup/pids/sluice", "/sys/fs/cgroup/memory/sluice", "/sys/fs/cgroup/sluice"):
        if os.path.isdir(h):
            names += [e for e in os.listdir(h) if os.path.isdir(os.path.join(h, e))]
    return names


def processes_with(marker):
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                if marker.encode() in f.read().replace(b"\0", b" "):
                    found.append(int(pid))
        except OSError:
            pass
    return found


# --- tests ----------------------------------------------------------------------------------

def test_initialize_negotiates_the_protocol_version(s):
    got = s.initialize("2025-06-18")
    r = got["result"]
    assert r["protocolVersion"] == "2025-06-18", r
    assert r["serverInfo"]["name"] == "sluice" and r["serverInfo"]["version"], r
    assert r["capabilities"] == {"tools": {"listChanged": False}}, r
    for asked, answered in (("2025-11-25", "2025-11-25"), ("2025-03-26", "2025-03-26"),
                            ("2024-11-05", "2024-11-05"), ("1999-01-01", "2025-06-18")):
        got = s.request("initialize", {"protocolVersion": asked, "capabilities": {},
                                       "clientInfo": {"name": "x", "version": "1"}})
        assert got["result"]["protocolVersion"] == answered, (asked, got)
    assert s.request("ping")["result"] == {}


def test_tools_list_is_the_published_file(s):
    s.initialize()
    tools = s.request("tools/list")["result"]["tools"]
    assert {t["name"] for t in tools} == {"run_command", "write_file", "read_file", "list_files",
                                          "explain_egress"}, tools
    published = tools_published()
    # The test workflow has `network: none`: run_command's description says so, nothing else
    # differs from the published file.
    note = tools[[t["name"] for t in tools].index("run_command")]["description"]
    assert note.startswith(published["run_command"]["description"]), note
    assert "no network" in note[len(published["run_command"]["description"]):], note
    published["run_command"]["description"] = note
    assert {t["name"]: t for t in tools} == published
    for t in tools:
        for key in ("inputSchema", "outputSchema"):
            assert t[key]["type"] == "object", t
            jsonschema.Draft202012Validator.check_schema(t[key])
            jsonschema.Draft7Validator.check_schema(t[key])


def test_json_rpc_errors(s):
    s.initialize()

    def expect(raw, code, id_=None):
        s.send_raw(raw if isinstance(raw, bytes) else json.dumps(raw).encode() + b"\n")
        got = s.line()
        assert got.get("jsonrpc") == "2.0", got
        assert got["id"] == id_, (raw, got)
        assert got["error"]["code"] == code, (raw, got)
        assert isinstance(got["error"]["message"], str) and got["error"]["message"], got

    expect(b'{"jsonrpc": "2.0", "id": 1, "method": "ping"\n', -32700)  # truncated JSON
    expect(b"not json at all\n", -32700)
    expect(b"\xff\xfe\n", -32700)
    expect([{"jsonrpc": "2.0", "id": 1, "method": "ping"}], -32600)  # batches: not in MCP
    expect(42, -32600)
    expect("ping", -32600)
    expect({"id": 2, "method": "ping"}, -32600, 2)  # no jsonrpc member
    expect({"jsonrpc": "1.0", "id": 3, "method": "ping"}, -32600, 3)
    expect({"jsonrpc": "2.0", "id": {"a": 1}, "method": "ping"}, -32600)
    expect({"jsonrpc": "2.0", "id": 1.5, "method": "ping"}, -32600)
    expect({"jsonrpc": "2.0", "id": 4, "method": 7}, -32600, 4)
    expect({"jsonrpc": "2.0", "id": 5}, -32600, 5)
    expect({"jsonrpc": "2.0", "id": 6, "method": "resources/list"}, -32601, 6)
    expect({"jsonrpc": "2.0", "id": "seven", "method": "no/such"}, -32601, "seven")
    expect({"jsonrpc": "2.0", "id": 8, "method": "ping", "params": [1]}, -32602, 8)
    expect({"jsonrpc": "2.0", "id": 9, "method": "initialize", "params": {}}, -32602, 9)
    call = lambda i, p: {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": p}
    expect(call(10, {"name": "rm_rf", "arguments": {}}), -32602, 10)
    expect(call(11, {"arguments": {}}), -32602, 11)
    expect(call(12, {"name": "run_command", "arguments": {"command": 5}}), -32602, 12)
    expect(call(13, {"name": "run_command", "arguments": {"command": "true", "extra": 1}}), -32602, 13)
    expect(call(14, {"name": "run_command", "arguments": {"command": "true", "argv": ["true"]}}), -32602, 14)
    expect(call(15, {"name": "run_command", "arguments": {}}), -32602, 15)
    expect(call(16, {"name": "run_command", "arguments": {"argv": []}}), -32602, 16)
    expect(call(17, {"name": "run_command", "arguments": {"argv": ["ls", 3]}}), -32602, 17)
    expect(call(18, {"name": "write_file", "arguments": {"path": "/work/a"}}), -32602, 18)
    expect(call(19, {"name": "read_file", "arguments": {"path": ""}}), -32602, 19)
    expect(call(20, {"name": "explain_egress", "arguments": {"url": ["x"]}}), -32602, 20)
    expect(call(21, {"name": "list_files", "arguments": "nope"}), -32602, 21)
    # Notifications are never answered, even malformed or unknown ones; a blank line is nothing.
    s.send({"jsonrpc": "2.0", "method": "notifications/whatever", "params": {}})
    s.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 999}})
    s.send_raw(b"\n   \n")
    s.send({"jsonrpc": "2.0", "id": 22, "method": "ping"})
    assert s.line() == {"jsonrpc": "2.0", "id": 22, "result": {}}
    # A response to nothing the server asked is ignored.
    s.send({"jsonrpc": "2.0", "id": "sluice-approval-77", "result": {"action": "accept"}})
    s.send({"jsonrpc": "2.0", "id": 23, "method": "ping"})
    assert s.line()["id"] == 23


def test_tools_work_in_one_session(s):
    s.initialize()
    out = check_output("run_command", s.call("run_command", {"command": "echo hi; echo err >&2; exit 3"}))
    assert out["exit"]["code"] == 3 and out["stdout"]["text"] == "hi\n", out  # not a tool error
    assert out["stderr"]["text"] == "err\n", out
    session = out["session_id"]
    assert session.startswith("se-"), out
    info = check_output("write_file", s.call("write_file", {"path": "prog.sh", "content": "echo from-file $1\n"}))
    assert info["path"] == "/work/prog.sh" and info["bytes"] == 18, info
    out = check_output("run_command", s.call("run_command", {"argv": ["/bin/sh", "prog.sh", "x"],
                                                             "stdin": "ignored", "timeout": 20}))
    assert out["stdout"]["text"] == "from-file x\n" and out["session_id"] == session, out
    out = check_output("run_command", s.call("run_command", {"command": "cat > /output/o.txt; ls /output",
                                                             "stdin": "in\u00e9", "timeout": "10s"}))
    got = check_output("read_file", s.call("read_file", {"path": "/output/o.txt"}))
    assert got["content"] == "in\u00e9" and got["encoding"] == "utf-8" and got["bytes"] == 4, got
    check_output("run_command", s.call("run_command", {"command": "printf '\\377\\000A' > /tmp/bin"}))
    got = check_output("read_file", s.call("read_file", {"path": "/tmp/bin"}))
    assert got["encoding"] == "base64" and got["content"] == "/wBB" and got["bytes"] == 3, got
    listing = check_output("list_files", s.call("list_files", {}))
    assert listing["path"] == "/work" and {"name": "prog.sh", "type": "file", "bytes": 18} in listing["entries"], listing
    check_output("list_files", s.call("list_files", {"path": "/output"}))
    ex = check_output("explain_egress", s.call("explain_egress", {"url": "https://example.com/x", "method": "POST"}))
    assert ex["decision"] == "deny" and ex["workflow"] == "shell", ex
    # A command killed by its timeout is a result too, with the limit named.
    out = check_output("run_command", s.call("run_command", {"command": "sleep 30", "timeout": 0.5}))
    assert out["limit_hit"] == "timeout", out
    # Tool errors: isError results, the server carries on.
    check_error(s.call("read_file", {"path": "/work/missing.txt"}), "missing.txt")
    check_error(s.call("read_file", {"path": "/work"}), "directory")
    check_error(s.call("list_files", {"path": "/work/prog.sh"}), "not a directory")
    check_error(s.call("run_command", {"command": "true", "timeout": "forever"}), "timeout")
    check_error(s.call("run_command", {"command": "true", "timeout": "10h"}), "timeout")
    check_error(s.call("run_command", {"command": "true", "timeout": -1}), "timeout")
    check_error(s.call("explain_egress", {"url": "not a url"}), "url")
    assert s.request("ping")["result"] == {}


def test_file_tools_stay_inside_the_sandbox(s):
    s.initialize()
    # `..`, absolute paths elsewhere, and links planted by the sandboxed code itself.
    for path in ("/work/../etc/passwd", "../etc/passwd", "/etc/passwd", "/proc/1/environ",
                 "/input/x", "/work/a/../../etc/passwd", "/usr/bin/sh"):
        check_error(s.call("read_file", {"path": path}))
        check_error(s.call("write_file", {"path": path, "content": "x"}))
    check_error(s.call("list_files", {"path": "/"}))
    check_error(s.call("list_files", {"path": "/etc"}))
    host_secret = os.path.join(s.tmp, "host-secret")
    with open(host_secret, "w") as f:
        f.write("HOST-ONLY-CONTENT")
    out = check_output("run_command", s.call("run_command", {"command":
        "ln -s /etc/passwd /work/pw; ln -s /etc /work/etcdir; ln -s %s /work/host; "
        "ln -s / /tmp/root; mkdir -p /output/d; ln -s ../../etc /output/d/up; echo ok" % host_secret}))
    assert out["stdout"]["text"] == "ok\n", out
    for path in ("/work/pw", "/work/etcdir/passwd", "/work/host", "/tmp/root/etc/passwd",
                 "/output/d/up/passwd"):
        text = check_error(s.call("read_file", {"path": path}))
        assert "HOST-ONLY-CONTENT" not in text and "root:" not in text, text
    for path in ("/work/etcdir/evil", "/work/pw", "/output/d/up/evil"):
        check_error(s.call("write_file", {"path": path, "content": "evil"}))
    # A link to the sandbox's own root resolves inside the sandbox: /tmp/root/tmp is its /tmp.
    check_output("write_file", s.call("write_file", {"path": "/tmp/root/tmp/evil", "content": "inside"}))
    out = check_output("run_command", s.call("run_command", {"command": "cat /tmp/evil"}))
    assert out["stdout"]["text"] == "inside", out
    check_error(s.call("list_files", {"path": "/work/etcdir"}))
    check_error(s.call("list_files", {"path": "/tmp/root"}))
    assert not os.path.exists("/etc/evil") and not os.path.exists("/tmp/evil")
    with open(host_secret) as f:
        assert f.read() == "HOST-ONLY-CONTENT"
    # The link itself is listed as what it is, never followed.
    listing = check_output("list_files", s.call("list_files", {"path": "/work"}))
    assert all(e["name"] != "passwd" for e in listing["entries"]), listing


def test_a_100_mib_line_is_skipped_without_being_buffered(s):
    s.initialize()
    chunk = b"x" * (1 << 20)

    def flood():
        s.proc.stdin.write(b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"junk":"')
        for _ in range(100):
            s.proc.stdin.write(chunk)
        s.proc.stdin.write(b'"}}\n')
        s.proc.stdin.write(b'{"jsonrpc":"2.0","id":"after","method":"ping"}\n')
        s.proc.stdin.flush()

    t = threading.Thread(target=flood)
    t.start()
    got = s.line()
    assert got["id"] is None and got["error"]["code"] in (-32600, -32700), got
    assert s.line() == {"jsonrpc": "2.0", "id": "after", "result": {}}
    t.join()
    with open("/proc/%d/status" % s.proc.pid) as f:
        hwm_kib = int([l for l in f if l.startswith("VmHWM:")][0].split()[1])
    # Peak memory stays far below the line's 100 MiB (the cap is 16 MiB).
    assert hwm_kib < 80 * 1024, "peak RSS %d KiB" % hwm_kib
    # A line just under the cap is still read and answered (here: a parse error, it is not JSON).
    s.send_raw(b"y" * (15 << 20) + b"\n")
    assert s.line()["error"]["code"] == -32700


def test_deep_nesting_and_random_bytes_do_not_take_it_down(s):
    import random
    s.initialize()
    # A million levels of nesting, bare and inside a tools/call: refused before parsing
    # (copying such a value recursively would overflow the stack).
    for line in (b"[" * 3000000 + b"]" * 3000000,
                 b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_command",'
                 b'"arguments":{"argv":' + b"[" * 1000000 + b"]" * 1000000 + b"}}}",
                 b'{"jsonrpc":"2.0","id":2,"method":"ping","params":{"a":' + b"{\"b\":" * 100000 + b"1" + b"}" * 100000 + b"}}"):
        s.send_raw(line + b"\n")
        got = s.line()
        assert got["id"] is None and got["error"]["code"] == -32600 and "nested" in got["error"]["message"], got
    # Brackets inside strings do not count; modest nesting is fine.
    s.send_raw(b'{"jsonrpc":"2.0","id":3,"method":"ping","params":{"a":' + b"[" * 60 + b"]" * 60 +
               b',"s":"' + b"[" * 500 + b'\\"{"}}\n')
    assert s.line() == {"jsonrpc": "2.0", "id": 3, "result": {}}
    rng = random.Random(7)
    lines = [bytes(rng.randrange(256) for _ in range(rng.randint(1, 300))).replace(b"\n", b" ")
             for _ in range(2000)]
    lines = [l for l in lines if l.strip(b" \t\r")]
    s.send_raw(b"\n".join(lines) + b"\n")
    for _ in lines:
        got = s.line()
        assert got["id"] is None and got["error"]["code"] in (-32700, -32600), got
    assert s.request("ping")["result"] == {}


def test_5000_pipelined_pings_answered_in_order(s):
    s.initialize()
    n = 5000
    data = b"".join(b'{"jsonrpc":"2.0","id":%d,"method":"ping"}\n' % i for i in range(n))
    t = threading.Thread(target=lambda: s.send_raw(data))
    t.start()
    for i in range(n):
        got = s.line()
        assert got == {"jsonrpc": "2.0", "id": i, "result": {}}, (i, got)
    t.join()


def test_ping_answers_while_a_command_runs(s):
    s.initialize()
    s.send({"jsonrpc": "2.0", "id": "long", "method": "tools/call",
            "params": {"name": "run_command", "arguments": {"command": "sleep 3; echo done"}}})
    s.send({"jsonrpc": "2.0", "id": "p", "method": "ping"})
    assert s.line() == {"jsonrpc": "2.0", "id": "p", "result": {}}  # before the command's answer
    got = s.line()
    assert got["id"] == "long" and got["result"]["structuredContent"]["stdout"]["text"] == "done\n", got


def test_cancel_stops_the_running_command(s):
    s.initialize()
    marker = "5151%d" % os.getpid()
    s.send({"jsonrpc": "2.0", "id": "c", "method": "tools/call",
            "params": {"name": "run_command", "arguments": {"argv": ["sleep", marker]}}})
    for _ in range(500):
        if processes_with("sleep " + marker):
            break
        time.sleep(0.02)
    assert processes_with("sleep " + marker)
    s.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "c"}})
    # Not answered (cancelled); the next request is.
    assert s.request("tools/call", {"name": "run_command", "arguments": {"command": "echo next"}})[
        "result"]["structuredContent"]["stdout"]["text"] == "next\n"
    assert not processes_with("sleep " + marker)


def children_named(ppid, comm):
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % pid) as f:
                stat = f.read()
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        if name == comm and int(fields[1]) == ppid and fields[0] != "Z":
            found.append(int(pid))
    return found


def test_eof_ends_the_session_with_its_receipt_and_leaves_nothing(s):
    s.initialize()
    marker = "5252%d" % os.getpid()
    out = check_output("run_command", s.call("run_command", {"command": "(sleep %s &) ; echo started" % marker}))
    session = out["session_id"]
    # The session's sandbox comes from the zygote forked before the server loaded anything.
    zygotes = children_named(s.proc.pid, "sluice-zygote")
    assert len(zygotes) == 1, zygotes
    assert len(children_named(s.proc.pid, "sluice-init")) == 1
    s.send({"jsonrpc": "2.0", "id": "last", "method": "tools/call",
            "params": {"name": "run_command", "arguments": {"command": "echo last"}}})
    rc = s.close_and_wait()  # the call sent before EOF is still answered
    assert rc == 0, s.stderr()
    assert s.line()["result"]["structuredContent"]["stdout"]["text"] == "last\n"
    check_gone(s, session, marker, "client", 3)
    def zygote_alive():
        try:
            with open("/proc/%d/stat" % zygotes[0]) as f:
                stat = f.read()
        except OSError:
            return False
        return "(sluice-zygote)" in stat and stat[stat.rindex(")") + 2] != "Z"
    for _ in range(200):
        if not zygote_alive():
            break
        time.sleep(0.01)
    assert not zygote_alive(), "the zygote outlived the server"


def test_sigterm_stops_the_command_and_ends_the_session(s):
    s.initialize()
    marker = "5353%d" % os.getpid()
    out = check_output("run_command", s.call("run_command", {"command": "echo first"}))
    session = out["session_id"]
    s.send({"jsonrpc": "2.0", "id": "slow", "method": "tools/call",
            "params": {"name": "run_command", "arguments": {"argv": ["sleep", marker]}}})
    for _ in range(500):
        if processes_with("sleep " + marker):
            break
        time.sleep(0.02)
    assert processes_with("sleep " + marker)
    s.proc.send_signal(signal.SIGTERM)
    assert s.proc.wait(timeout=WAIT) == 0, s.stderr()
    check_gone(s, session, marker, "shutdown", 3)


def check_gone(s, session, marker, ended_by, rows):
    assert not processes_with(marker), processes_with(marker)
    assert not [c for c in sluice_cgroups() if c.startswith("%d." % s.proc.pid)], sluice_cgroups()
    summary = sql(s.db, "SELECT receipt FROM executions WHERE id = '%s'" % session)
    assert len(summary) == 1, summary
    receipt = summary[0]["receipt"]
    receipt = json.loads(receipt) if isinstance(receipt, str) else receipt
    assert receipt["ended_by"] == ended_by and receipt["session_id"] == session, receipt
    execs = sql(s.db, "SELECT id FROM executions WHERE session_id = '%s' AND id != '%s'" % (session, session))
    assert len(execs) == rows - 1 and sorted(receipt["execs"]) == sorted(e["id"] for e in execs), (execs, receipt)
    verify = subprocess.run([SLUICE, "audit", "verify", "--db", s.db], capture_output=True, text=True)
    assert verify.returncode == 0, verify.stdout + verify.stderr


class Upstream:
    """An HTTP server on 127.0.0.1 (port 0) answering "upstream PATH"."""

    def __init__(self):
        import http.server

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                body = ("upstream " + self.path).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def ask_server(s, ask_timeout, extra=()):
    """Restarts `s` on a workflow whose only rule asks before reaching an upstream."""
    s.kill()
    up = Upstream()
    with open(os.path.join(s.tmp, "policies", "ask.yaml"), "w") as f:
        f.write("apiVersion: sluice/v1\nkind: Workflow\nname: ask\nsandbox:\n  timeout: 60s\n"
                "  network: proxy\negress:\n  rules:\n    - id: ask-up\n      action: ask\n"
                "      cidrs: [\"127.0.0.1/32\"]\n      allow_private: true\n      ports: [%d]\n"
                "      ask: {timeout: %s}\n" % (up.port, ask_timeout))
    return Server(s.tmp, "ask", extra), up


def fetch(s, up, path):
    """Sends a run_command that fetches `path` from the upstream; returns its request id."""
    s.next_id += 1
    s.send({"jsonrpc": "2.0", "id": s.next_id, "method": "tools/call", "params": {
        "name": "run_command",
        "arguments": {"command": "curl -s -w ' %%{http_code}' http://127.0.0.1:%d%s" % (up.port, path)}}})
    return s.next_id


def fetch_asked(s, up, path):
    """fetch()es `path` where approval is asked; returns the call's request id and the
    elicitation/create the server sends first."""
    call_id = fetch(s, up, path)
    req = s.line()
    assert req["method"] == "elicitation/create", req
    return call_id, req


def test_elicitation_only_accept_with_allow_true_allows(s):
    s, up = ask_server(s, "30s")
    try:
        s.initialize("2025-06-18", {"elicitation": {}})
        answers = [
            ("decline", {"result": {"action": "decline"}}),
            ("cancel", {"result": {"action": "cancel"}}),
            ("error", {"error": {"code": -1, "message": "user closed the dialog"}}),
            ("no-content", {"result": {"action": "accept"}}),
            ("string-true", {"result": {"action": "accept", "content": {"allow": "true"}}}),
            ("allow-false", {"result": {"action": "accept", "content": {"allow": False}}}),
            ("allow-true", {"result": {"action": "accept", "content": {"allow": True}}}),
        ]
        for name, answer in answers:
            call_id = fetch(s, up, "/" + name)
            req = s.line()
            assert req["method"] == "elicitation/create" and "id" in req, req
            params = req["params"]
            assert params["requestedSchema"]["required"] == ["allow"], params
            assert params["requestedSchema"]["properties"]["allow"]["type"] == "boolean", params
            for part in ("127.0.0.1:%d" % up.port, "GET /" + name, "ask-up"):
                assert part in params["message"], (part, params["message"])
            s.send(dict({"jsonrpc": "2.0", "id": req["id"]}, **answer))
            got = s.line()
            assert got["id"] == call_id, got
            out = check_output("run_command", got["result"])
            if name == "allow-true":
                assert out["stdout"]["text"] == "upstream /allow-true 200", out
            else:
                assert out["stdout"]["text"].endswith(" 403"), (name, out)
                assert [d["reason"] for d in out["network"]["denials"]] == ["approval_denied"], (name, out)
        s.close_and_wait()
        rows = json.loads(subprocess.run([SLUICE, "audit", "query", "--db", s.db, "--kind", "approvals",
                                          "--format", "json"], capture_output=True, text=True).stdout)
        assert [(r["path"], r["decision"], r["decided_by"]) for r in rows] == [
            ("/" + n, "allow" if n == "allow-true" else "deny", "mcp") for n, _ in answers], rows
    finally:
        s.kill()
        up.close()


def test_an_unanswered_elicitation_is_withdrawn_when_its_approval_times_out(s):
    s, up = ask_server(s, "1s")
    try:
        s.initialize("2025-06-18", {"elicitation": {}})
        call_id, req = fetch_asked(s, up, "/late")
        # Not answered: the approval times out, the command gets its 403 and ends; the question
        # is withdrawn before the result comes.
        cancel = s.line()
        assert cancel["method"] == "notifications/cancelled" and "id" not in cancel, cancel
        assert cancel["params"]["requestId"] == req["id"], cancel
        got = s.line()
        assert got["id"] == call_id, got
        out = check_output("run_command", got["result"])
        assert [d["reason"] for d in out["network"]["denials"]] == ["approval_timeout"], out
        # A late answer changes nothing and is not an error.
        s.send({"jsonrpc": "2.0", "id": req["id"], "result": {"action": "accept", "content": {"allow": True}}})
        assert s.request("ping")["result"] == {}
    finally:
        s.kill()
        up.close()


def test_without_elicitation_an_approval_waits_for_its_timeout(s):
    s, up = ask_server(s, "1s")
    try:
        s.initialize("2025-06-18", {})  # no elicitation capability
        call_id = fetch(s, up, "/x")
        got = s.line()  # no elicitation/create first: the tool's result
        assert got["id"] == call_id, got
        out = check_output("run_command", got["result"])
        assert out["stdout"]["text"].endswith(" 403"), out
        assert [d["reason"] for d in out["network"]["denials"]] == ["approval_timeout"], out
    finally:
        s.kill()
        up.close()


def test_approve_with_answers_instead_of_the_client(s):
    seen = os.path.join(s.tmp, "seen.json")
    # The command reads the approval's JSON and allows only /yes.
    cmd = "tee %s | grep -q '\"path\":\"/yes\"' && echo allow || echo deny" % seen
    s, up = ask_server(s, "30s", ["--approve-with", cmd])
    try:
        s.initialize("2025-06-18", {"elicitation": {}})  # not asked: --approve-with answers
        for path, expect in (("/yes", "upstream /yes 200"), ("/no", None)):
            call_id = fetch(s, up, path)
            got = s.line()
            assert got["id"] == call_id, got  # no elicitation/create came first
            out = check_output("run_command", got["result"])
            if expect:
                assert out["stdout"]["text"] == expect, out
            else:
                assert [d["reason"] for d in out["network"]["denials"]] == ["approval_denied"], out
        with open(seen) as f:
            approval = json.load(f)
        assert approval["host"] == "127.0.0.1" and approval["port"] == up.port, approval
        assert approval["session_id"].startswith("se-") and approval["rule"] == "ask-up", approval
        s.close_and_wait()
        rows = json.loads(subprocess.run([SLUICE, "audit", "query", "--db", s.db, "--kind", "approvals",
                                          "--format", "json"], capture_output=True, text=True).stdout)
        assert [(r["path"], r["decision"]) for r in rows] == [("/yes", "allow"), ("/no", "deny")], rows
        assert all(r["decided_by"] != "mcp" for r in rows), rows
    finally:
        s.kill()
        up.close()


def test_signing_key_signs_the_audit_store(s):
    s.kill()
    keys = os.path.join(s.tmp, "keys")
    subprocess.run([SLUICE, "audit", "keygen", "--out", keys], check=True, capture_output=True)
    s = Server(s.tmp, "shell", ["--signing-key", os.path.join(keys, "audit.key")])
    try:
        s.initialize()
        check_output("run_command", s.call("run_command", {"command": "true"}))
        assert s.close_and_wait() == 0, s.stderr()
        out = subprocess.run([SLUICE, "audit", "verify", "--db", s.db, "--pubkey",
                              os.path.join(keys, "audit.pub")], capture_output=True, text=True)
        assert out.returncode == 0 and "signatures valid" in out.stdout, out.stdout + out.stderr
    finally:
        s.kill()


def test_duplicate_keys_are_a_parse_error(s):
    """A key named twice in any object of a line is a parse error naming the key."""
    s.initialize()

    def expect_duplicate(raw, key):
        s.send_raw(raw + b"\n")
        got = s.line()
        assert got["id"] is None and got["error"]["code"] == -32700, (raw, got)
        assert 'duplicate key "%s"' % key in got["error"]["message"], got
        assert "line 1, column " in got["error"]["message"], got

    expect_duplicate(b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "id": 2}', "id")
    expect_duplicate(b'{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": '
                     b'"write_file", "arguments": {"path": "/work/a", "content": "x", '
                     b'"p\\u0061th": "/tmp/b"}}}', "path")
    expect_duplicate(b'{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": '
                     b'{"requestId": 1, "requestId": 2}}', "requestId")
    s.send({"jsonrpc": "2.0", "id": 4, "method": "ping"})
    assert s.line() == {"jsonrpc": "2.0", "id": 4, "result": {}}


def test_a_duplicate_key_in_an_elicitation_answer_decides_nothing(s):
    """An answer naming `result` twice (decline, then accept) is a parse error: the approval
    still waits, and the next well-formed answer decides it."""
    s, up = ask_server(s, "30s")
    try:
        s.initialize("2025-06-18", {"elicitation": {}})
        call_id, req = fetch_asked(s, up, "/dup")
        message = req["params"]["message"]
        assert "this GET request only (scope once)" in message, message
        assert "host = requests of every method to 127.0.0.1:%d" % up.port in message, message
        s.send_raw(json.dumps({"jsonrpc": "2.0", "id": req["id"]}).encode()[:-1] +
                   b', "result": {"action": "decline"}, '
                   b'"result": {"action": "accept", "content": {"allow": true}}}\n')
        got = s.line()
        assert got["id"] is None and got["error"]["code"] == -32700, got
        assert 'duplicate key "result"' in got["error"]["message"], got
        s.send({"jsonrpc": "2.0", "id": req["id"], "result": {"action": "decline"}})
        got = s.line()
        assert got["id"] == call_id, got
        out = check_output("run_command", got["result"])
        assert out["stdout"]["text"].endswith(" 403"), out
    finally:
        s.kill()
        up.close()


def test_logs_stay_out_of_the_agents_stderr_by_default(s):
    # A run under the default --log-level: sluice's own log lines (session start and end, the
    # proxy's) would be noise on the agent's stderr. With --log-file they go to the file.
    s.initialize()
    got = s.call("run_command", {"command": "echo hi"})
    assert check_output("run_command", got)["stdout"]["text"] == "hi\n", got
    # SIGTERM makes sluice log "signal 15: stopping" at info: on stderr before, nowhere now.
    s.proc.send_signal(signal.SIGTERM)
    s.proc.wait(timeout=WAIT)
    assert s.stderr() == "", s.stderr()
    log = os.path.join(s.tmp, "mcp.log")
    t = Server(s.tmp, extra=("--log-file", log, "--log-level", "debug"))
    try:
        t.initialize()
        t.call("run_command", {"command": "echo hi"})
        assert t.close_and_wait() == 0
        assert t.stderr() == "", t.stderr()
        with open(log) as f:
            lines = f.read()
        assert "[audit] [debug] audit store" in lines, lines
        assert oct(os.stat(log).st_mode & 0o777) == "0o600", oct(os.stat(log).st_mode)
    finally:
        t.kill()


def test_a_bad_workflow_is_refused_before_any_message(s):
    s.kill()
    out = subprocess.run([SLUICE, "mcp", "--policy-dir", os.path.join(s.tmp, "policies"),
                          "--workflow", "nope", "--audit", s.db], input=b"", capture_output=True,
                         timeout=WAIT)
    assert out.returncode == 1 and out.stdout == b"", out
    assert b"nope" in out.stderr and b"shell" in out.stderr, out.stderr


def main():
    if os.geteuid() != 0:
        if isolation_required():
            print("FAIL: the sandbox needs root here (CI=true or SLUICE_REQUIRE_ISOLATION=1)")
            return 1
        print("SKIP: the sandbox needs root")
        return 77
    tests = [(n, f) for n, f in globals().items() if n.startswith("test_") and (not ONLY or n in ONLY)]
    failed = 0
    for name, fn in tests:
        tmp = tempfile.mkdtemp(prefix="sluice-mcp-raw-")
        os.makedirs(os.path.join(tmp, "policies"))
        with open(os.path.join(tmp, "policies", "shell.yaml"), "w") as f:
            f.write(WORKFLOW)
        s = Server(tmp)
        try:
            fn(s)
            print("PASS", name, flush=True)
        except Exception:  # noqa: BLE001 - report every test
            failed += 1
            print("FAIL", name, flush=True)
            traceback.print_exc()
            print("--- sluice mcp stderr ---\n" + s.stderr()[-4000:], flush=True)
        finally:
            s.kill()
            shutil.rmtree(tmp, ignore_errors=True)
    print("%d passed, %d failed" % (len(tests) - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
