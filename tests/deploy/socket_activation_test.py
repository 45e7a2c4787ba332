#!/usr/bin/env python3
"""`sluice serve` under socket activation, as sluice.socket starts it.

  socket_activation_test.py SLUICE SOURCE_DIR

systemd-socket-activate (package systemd) makes the Unix socket and starts `sluice serve` at
the first connection with LISTEN_PID/LISTEN_FDS/LISTEN_FDNAMES, as systemd does; the project's
own client (examples/clients/sluice_client.py) is the caller. Checks: the first request is
answered on the inherited socket; a run goes through; stderr named by JOURNAL_STREAM gets JSON
log lines with spdlog's fields; SIGHUP reloads the policy directory; SIGTERM drains and exits
0 leaving systemd's socket file in place. Then a TCP socket passed the same way without
--token-file is refused. Needs root (sandboxes) and systemd-socket-activate: skips (77)
without them, except under CI=true, where it fails.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WAIT_SECONDS = 30  # a bound on waiting for the daemon, never a measured threshold


def skip_or_fail(why):
    print(f"socket_activation: {why}", file=sys.stderr)
    sys.exit(1 if os.environ.get("CI") == "true" else 77)


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def wait_for(predicate, what):
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def json_log_lines(path):
    """Every stderr line of sluice, each of which must be one JSON object."""
    lines = []
    for line in Path(path).read_text().splitlines():
        if line.startswith(("Listening on", "Communication attempt", "Execing")):
            continue  # systemd-socket-activate's own words, before the exec
        lines.append(json.loads(line))
    return lines


def activated_serve(sluice, tmp, client_module):
    """The main scenario: systemd-socket-activate + the real client."""
    sock, log = tmp / "api.sock", tmp / "serve.log"
    policies = tmp / "policies"
    log_file = open(log, "w")
    st = os.fstat(log_file.fileno())
    # JOURNAL_STREAM names the file stderr is: serve's default --log-format auto picks JSON.
    proc = subprocess.Popen(
        ["systemd-socket-activate", "-l", str(sock), "--fdname=api",
         f"--setenv=JOURNAL_STREAM={st.st_dev}:{st.st_ino}",
         sluice, "serve", "--policy-dir", str(policies), "--audit", str(tmp / "audit.db"),
         # The same path as a --listen too (a unit that kept it): served once, systemd's.
         "--listen", f"unix:{sock}"],
        stdout=log_file, stderr=log_file)
    try:
        wait_for(sock.exists, "the socket systemd-socket-activate makes")
        client = client_module.Client("unix:" + str(sock), timeout=WAIT_SECONDS)
        names = [w["name"] for w in client.workflows()]  # this connection starts sluice
        check(names == ["data-analysis"], f"workflows {names}")
        receipt = client.run("data-analysis", ["/bin/echo", "activated"])
        check(receipt["exit"]["code"] == 0 and receipt["stdout"]["text"] == "activated\n",
              f"run receipt {receipt}")
        logs = json_log_lines(log)
        check(all({"ts", "level", "logger", "msg"} <= set(l) for l in logs), f"log fields {logs}")
        listening = [l["msg"] for l in logs if l["msg"].startswith("sluice serve listening")]
        check(listening == [f"sluice serve listening on unix:{sock} (from systemd)"],
              f"listeners: {listening}")
        shutil.copy(policies.parent / "web-research.yaml", policies / "web-research.yaml")
        proc.send_signal(signal.SIGHUP)  # the exec'd sluice has the launcher's pid
        wait_for(lambda: len(client.workflows()) == 2,
                 "the reload to list web-research: " + log.read_text())
        proc.send_signal(signal.SIGTERM)
        check(proc.wait(timeout=WAIT_SECONDS) == 0, "serve did not exit 0 after SIGTERM")
        check(sock.is_socket(), "serve removed the socket file systemd owns")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log_file.close()


def tcp_without_token_refused(sluice, tmp):
    """A TCP socket passed by 'systemd' is held to --listen's rule: no token file, no start."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    fd = listener.fileno()
    # LISTEN_PID must be sluice's own pid: a shell sets it to its $$ and execs sluice.
    script = 'export LISTEN_PID=$$ LISTEN_FDS=1 LISTEN_FDNAMES=api; exec "$@"'
    proc = subprocess.run(
        ["bash", "-c", script, "-", sluice, "serve", "--policy-dir", str(tmp / "policies"),
         "--audit", str(tmp / "tcp.db")],
        pass_fds=(3,), preexec_fn=lambda: os.dup2(fd, 3), capture_output=True, text=True,
        timeout=WAIT_SECONDS)
    listener.close()
    check(proc.returncode == 1, f"serve exited {proc.returncode} with a TCP socket and no token")
    check("a TCP listener needs --token-file" in proc.stderr, f"stderr: {proc.stderr}")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sluice, source = os.path.abspath(sys.argv[1]), Path(sys.argv[2])
    if os.geteuid() != 0:
        skip_or_fail("needs root (serve builds sandboxes)")
    if not shutil.which("systemd-socket-activate"):
        skip_or_fail("needs systemd-socket-activate (package systemd)")
    sys.path.insert(0, str(source / "examples" / "clients"))
    import sluice_client  # the project's own client, as a caller would use it

    with tempfile.TemporaryDirectory(dir=os.environ.get("KEEP_TMP")) as d:
        tmp = Path(d)
        (tmp / "policies").mkdir()
        workflows = source / "examples" / "workflows"
        shutil.copy(workflows / "data-analysis.yaml", tmp / "policies")
        shutil.copy(workflows / "web-research.yaml", tmp)
        activated_serve(sluice, tmp, sluice_client)
        tcp_without_token_refused(sluice, tmp)
    print("socket_activation: ok (inherited socket served, JSON logs, SIGHUP reload, "
          "TCP without tokens refused)")


if __name__ == "__main__":
    main()
