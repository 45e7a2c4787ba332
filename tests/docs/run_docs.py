#!/usr/bin/env python3
"""Runs every command block of README.md and docs/*.md against the built `sluice`.

  run_docs.py SOURCE_DIR SLUICE_BINARY [PAGE...]

The rules (which blocks run, how outputs and exit codes are stated, how a block is marked
as not runnable) are in tests/README.md, "Docs that run". Exit status: 0 when every runnable
block did what its page says, 1 otherwise, 77 (skip) without root unless CI=true or
SLUICE_REQUIRE_ISOLATION=1, where a missing root is a failure.
"""
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

COMMAND_LANGS = {"sh", "bash", "shell", "console"}
FENCE_RE = re.compile(r"^(\s*)```([\w+-]*)\s*$")
MARKER_RE = re.compile(r"^<!-- docs-check: (\w+)(?: \((.*)\))? -->$")
FILE_MARKER_RE = re.compile(r"^<!-- file: (\S+) -->$")
EXIT_RE = re.compile(r"#\s*exit (\d+)\b")
PRINTS_RE = re.compile(r"#\s*prints (?:\"([^\"]+)\"|`([^`]+)`|(.+?)\s*$)")
HEREDOC_RE = re.compile(r"<<-?\s*['\"]?(\w+)['\"]?")
ELLIPSIS_RE = re.compile(r"\.\.\.|…")
ASSIGN_RE = re.compile(r"^(?:export\s+)?([A-Za-z_]\w*)=")
BLOCK_TIMEOUT = 300
DAEMON_READY_SECONDS = 30
# The system paths the docs name, each an overlay in the checker's own mount namespace: the
# blocks may write there, the host's copies never change.
OVERLAID = ["/etc", "/var/lib", "/run"]


@dataclass
class Block:
    page: str
    line: int  # of the opening fence, 1-based
    lang: str
    body: list
    marker: str = ""  # "", "skip", "synopsis"
    reason: str = ""


@dataclass
class Command:
    line: int
    text: str  # the lines as the page has them, continuations and here-documents included
    expected: list = field(default_factory=list)  # transcript output lines
    exit_code: int | None = None
    prints: str | None = None
    background: bool = False
    shows_status: bool = False  # a transcript's `$ echo $?`


# ---------------------------------------------------------------- reading the pages


def is_command_block(lang, body):
    """sh/bash/shell/console blocks, and unlabelled blocks with a `sluice` or `$ ` line."""
    if lang in COMMAND_LANGS:
        return True
    return lang == "" and any(re.match(r"^\s*(\$ |sluice\s)", l) for l in body)


def read_blocks(page, text, problems):
    """Every command block of a page, with the docs-check marker on the line before it."""
    lines, blocks, i = text.split("\n"), [], 0
    while i < len(lines):
        m = FENCE_RE.match(lines[i])
        if not m:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not re.match(r"^\s*```\s*$", lines[j]):
            j += 1
        indent, lang = len(m.group(1)), m.group(2)
        body = [l[indent:] if l[:indent].isspace() else l for l in lines[i + 1:j]]
        if is_command_block(lang, body):
            block = Block(page, i + 1, lang, body)
            read_marker(block, lines[i - 1].strip() if i else "", problems)
            blocks.append(block)
        i = j + 1
    return blocks


def read_marker(block, previous_line, problems):
    m = MARKER_RE.match(previous_line)
    if not m:
        if previous_line.startswith("<!-- docs-check"):
            problems.append(f"{block.page}:{block.line - 1}: unreadable marker {previous_line!r}")
        return
    block.marker, block.reason = m.group(1), (m.group(2) or "").strip()
    if block.marker not in ("skip", "synopsis"):
        problems.append(f"{block.page}:{block.line - 1}: unknown marker '{block.marker}'")
    elif block.marker == "skip" and not block.reason:
        problems.append(f"{block.page}:{block.line - 1}: a skip needs a reason: "
                        "<!-- docs-check: skip (why it cannot run in a test) -->")


def inline_files(text):
    """`<!-- file: PATH -->` followed by a fenced block: the page defines PATH inline."""
    out, lines = {}, text.split("\n")
    for i, line in enumerate(lines[:-1]):
        m = FILE_MARKER_RE.match(line.strip())
        if m and lines[i + 1].startswith("```"):
            end = next(j for j in range(i + 2, len(lines)) if lines[j].startswith("```"))
            out[m.group(1)] = "\n".join(lines[i + 2:end]) + "\n"
    return out


def code_part(line):
    """The line without its trailing shell comment (quotes respected)."""
    quote = None
    for k, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (k == 0 or line[k - 1].isspace()):
            return line[:k].rstrip()
    return line.rstrip()


def continues(line):
    """A line the shell continues on the next: a trailing backslash, pipe, && or ||."""
    return code_part(line).endswith(("\\", "|", "&&"))


def take_command(lines, i, prefix=""):
    """One command starting at lines[i]: continuation lines and here-document bodies."""
    first = lines[i][len(prefix):]
    taken, k = [first], i + 1
    while continues(taken[-1]) and k < len(lines):
        taken.append(lines[k])
        k += 1
    for word in HEREDOC_RE.findall("\n".join(code_part(l) for l in taken)):
        while k < len(lines):
            taken.append(lines[k])
            k += 1
            if taken[-1].strip() == word:
                break
    return taken, k


def annotate(cmd, head_lines):
    """Reads `# exit N`, `# prints TEXT` and a trailing `&` off the command's own lines."""
    last = head_lines[-1]
    comment = last[len(code_part(last)):]
    if m := EXIT_RE.search(comment):
        cmd.exit_code = int(m.group(1))
    if m := PRINTS_RE.search(comment):
        cmd.prints = m.group(1) or m.group(2) or m.group(3)
    cmd.background = code_part(last).endswith("&") and not code_part(last).endswith("&&")


def script_commands(block):
    """A script block: every non-comment line starts a command."""
    cmds, i, lines = [], 0, block.body
    while i < len(lines):
        if not lines[i].strip() or lines[i].lstrip().startswith("#"):
            i += 1
            continue
        taken, k = take_command(lines, i)
        cmd = Command(block.line + 1 + i, "\n".join(taken))
        annotate(cmd, head_of(taken))
        cmds.append(cmd)
        i = k
    return cmds


def head_of(taken):
    """The command's lines before any here-document body."""
    head = [taken[0]]
    for line in taken[1:]:
        if not continues(head[-1]):
            break
        head.append(line)
    return head


def transcript_commands(block, problems):
    """A transcript: `$ COMMAND` lines, each followed by the output the page says it prints."""
    cmds, i, lines = [], 0, block.body
    while i < len(lines):
        if not lines[i].startswith("$ "):
            problems.append(f"{block.page}:{block.line + 1 + i}: transcript line before any "
                            f"`$ ` command: {lines[i]!r}")
            return []
        taken, k = take_command(lines, i, "$ ")
        cmd = Command(block.line + 1 + i, "\n".join(taken))
        annotate(cmd, head_of(taken))
        cmd.shows_status = cmd.text.strip() == "echo $?"
        while k < len(lines) and not lines[k].startswith("$ "):
            cmd.expected.append(lines[k])
            k += 1
        cmds.append(cmd)
        i = k
    return cmds


def is_transcript(block):
    return block.lang == "console" or any(l.startswith("$ ") for l in block.body)


# ---------------------------------------------------------------- writing the block's script

PRELUDE = r"""set -e
__fail() { echo "docs-check: $*" >&2; exit 99; }
__trap() { trap 'echo "docs-check: line $__line: exit $? from: $BASH_COMMAND" >&2' ERR; }
__ready() {  # PID LINE ADDRESS...: the daemon accepts connections on one of its addresses
  local pid=$1 line=$2; shift 2
  for __i in $(seq 1 $((DAEMON_READY_SECONDS * 10))); do
    kill -0 "$pid" 2>/dev/null || __fail "line $line: the daemon exited: $(cat "$DOCS_CHECK_DIR/daemon.$line.log")"
    for a in "$@"; do
      case "$a" in
        unix:*) python3 -c 'import socket,sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])' "${a#unix:}" 2>/dev/null && return 0 ;;
        *) (exec 3<>"/dev/tcp/${a%:*}/${a##*:}") 2>/dev/null && return 0 ;;
      esac
    done
    sleep 0.1
  done
  __fail "line $line: the daemon did not listen on $* within ${DAEMON_READY_SECONDS}s"
}
__trap
[ ! -f "$DOCS_CHECK_DIR/vars" ] || . "$DOCS_CHECK_DIR/vars"
"""


def listen_addresses(text):
    """Where a backgrounded daemon listens: its --listen values, else serve's default socket."""
    found = re.findall(r"--listen\s+(\S+)", text)
    if not found and re.search(r"\bsluice\s+serve\b", text):
        found = ["unix:/run/sluice/sluice.sock"]
    return found


def daemon_lines(cmd):
    """`CMD &` becomes `CMD >LOG 2>&1 &`, its pid noted for the end of the page."""
    head = head_of(cmd.text.split("\n"))
    code = code_part(head[-1])[:-1].rstrip()
    log = f'"$DOCS_CHECK_DIR/daemon.{cmd.line}.log"'
    text = "\n".join(head[:-1] + [f"{code} >{log} 2>&1 &"])
    ready = " ".join(shlex.quote(a) for a in listen_addresses(cmd.text))
    return (f"{text}\necho $! >>\"$DOCS_CHECK_DIR/pids\"\n"
            f"__ready $! {cmd.line} {ready}\n" if ready else
            f"{text}\necho $! >>\"$DOCS_CHECK_DIR/pids\"\n")


def checked_lines(cmd, capture):
    """Runs the command with errexit off, then checks its status (and output) as stated."""
    want = cmd.exit_code if cmd.exit_code is not None else 0
    out = f'"$DOCS_CHECK_DIR/out.{cmd.line}"'
    s = f"trap - ERR; set +e\n{{ {cmd.text}\n}} >{out} 2>&1\n__rc=$?\nset -e; __trap\n"
    s += f'echo "$__rc" >"$DOCS_CHECK_DIR/rc.{cmd.line}"\n'
    if capture:
        return s
    s += f"cat {out}\n"
    s += (f'[ "$__rc" -eq {want} ] || __fail "line {cmd.line}: exit $__rc, the page says '
          f'exit {want}"\n')
    return s


def script_for(cmds, transcript):
    s = PRELUDE
    for cmd in cmds:
        s += f"__line={cmd.line}\n"
        if cmd.shows_status:
            continue
        if cmd.background:
            s += daemon_lines(cmd)
        elif transcript:
            s += checked_lines(cmd, capture=True)
        elif cmd.exit_code is not None or cmd.prints is not None:
            s += checked_lines(cmd, capture=False)
        else:
            s += cmd.text + "\n"
    # Shell variables a block sets carry over to the page's later blocks.
    names = sorted({m.group(1) for c in cmds if (m := ASSIGN_RE.match(c.text))})
    if names:
        s += f'declare -p {" ".join(names)} >>"$DOCS_CHECK_DIR/vars"\n'
    return s


# ---------------------------------------------------------------- comparing transcripts


def output_matches(expected, got):
    """Exact, except `...` (or `…`) matches any text in a line, and any lines on its own."""
    parts = []
    for line in expected:
        if ELLIPSIS_RE.fullmatch(line.strip()):
            parts.append("(?s:.*?)")
        else:
            parts.append(ellipsis_pattern(line))
    return re.fullmatch("\n".join(parts), got) is not None


def ellipsis_pattern(line):
    return "[^\n]*?".join(re.escape(p) for p in ELLIPSIS_RE.split(line))


def prints_problems(block, cmds, run_dir):
    """`# prints TEXT`: the command's output has a line containing TEXT (`...` as above)."""
    problems = []
    for cmd in cmds:
        out_file = run_dir / f"out.{cmd.line}"
        if cmd.prints is None or not out_file.exists():
            continue
        got = out_file.read_text(errors="replace")
        if not re.search(ellipsis_pattern(cmd.prints), got):
            problems.append(f"{block.page}:{cmd.line}: the page says it prints "
                            f"{cmd.prints!r}; it printed:\n{got}")
    return problems


def transcript_problems(block, cmds, run_dir):
    problems, last_rc = [], None
    for cmd in cmds:
        where = f"{block.page}:{cmd.line}"
        if cmd.background:
            continue
        if cmd.shows_status:
            if cmd.expected and cmd.expected[0] != str(last_rc):
                problems.append(f"{where}: `$ echo $?` shows {cmd.expected[0]}, "
                                f"the command exited {last_rc}")
            continue
        rc_file, out_file = run_dir / f"rc.{cmd.line}", run_dir / f"out.{cmd.line}"
        if not rc_file.exists():
            break  # an earlier command failed the block; that is reported already
        last_rc = int(rc_file.read_text())
        got = out_file.read_text(errors="replace").rstrip("\n")
        want = "\n".join(cmd.expected).rstrip("\n")
        if not output_matches(want.split("\n") if want else [], got):
            problems.append(f"{where}: $ {cmd.text}\n--- the page says\n{want}\n"
                            f"--- sluice printed\n{got}")
    return problems


# ---------------------------------------------------------------- synopses


def synopsis_problems(block, sluice):
    """Every `--flag` of a `sluice SUB ...` synopsis is in `sluice SUB --help`."""
    problems, entries = [], []
    for line in block.body:
        if re.match(r"^sluice\s", line):
            words = []
            for w in line.split()[1:]:
                if not re.fullmatch(r"[a-z][a-z-]*", w):
                    break
                words.append(w)
            entries.append((words, line))
        elif entries and line.strip():
            entries[-1] = (entries[-1][0], entries[-1][1] + " " + line)
    for words, text in entries:
        help_run = subprocess.run([sluice, *words, "--help"], capture_output=True, text=True,
                                  timeout=30)
        if help_run.returncode != 0:
            problems.append(f"{block.page}:{block.line}: `sluice {' '.join(words)} --help` "
                            f"exited {help_run.returncode}")
            continue
        for flag in sorted(set(re.findall(r"--[a-z][a-z-]*", text))):
            if not re.search(re.escape(flag) + r"\b", help_run.stdout):
                problems.append(f"{block.page}:{block.line}: `sluice {' '.join(words)}` "
                                f"has no {flag} (its --help does not list it)")
    return problems


# ---------------------------------------------------------------- running a page


def run_block(block, cwd, env, run_dir):
    transcript = is_transcript(block)
    problems = []
    cmds = transcript_commands(block, problems) if transcript else script_commands(block)
    if problems:
        return problems
    script = run_dir / f"block.{block.line}.sh"
    script.write_text(script_for(cmds, transcript))
    log = run_dir / f"block.{block.line}.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(["bash", str(script)], cwd=cwd, env=env, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=BLOCK_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the block's own process group
            proc.wait()
            rc = "timeout"
    if rc != 0:
        text = log.read_text(errors="replace")[-4000:]
        problems.append(f"{block.page}:{block.line}: the block failed ({rc}):\n{text}")
    if transcript:
        problems += transcript_problems(block, cmds, run_dir)
    else:
        problems += prints_problems(block, cmds, run_dir)
    return problems


def stop_daemons(run_dir):
    """SIGTERM each daemon a page started (by pid), then SIGKILL what is left after 30 s."""
    pids_file, problems = run_dir / "pids", []
    pids = [int(p) for p in pids_file.read_text().split()] if pids_file.exists() else []
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 30
    for pid in pids:
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        if Path(f"/proc/{pid}").exists():
            os.kill(pid, signal.SIGKILL)
            problems.append(f"daemon pid {pid} ignored SIGTERM for 30 s")
    pids_file.unlink(missing_ok=True)
    return problems


def run_page(page, source, scratch, env, sluice, counts, skips):
    text = (source / page).read_text(encoding="utf-8")
    problems = []
    blocks = read_blocks(page, text, problems)
    cwd = scratch / "pages" / page.replace("/", "_")
    shutil.copytree(source / "examples", cwd / "examples")
    for rel, body in inline_files(text).items():
        (cwd / rel).parent.mkdir(parents=True, exist_ok=True)
        (cwd / rel).write_text(body, encoding="utf-8")
    run_dir = scratch / "runs" / page.replace("/", "_")
    run_dir.mkdir(parents=True)
    overlay_system_paths(scratch / "overlay" / page.replace("/", "_"), source)
    make_audit_store(cwd, env, sluice)
    env = dict(env, DOCS_CHECK_DIR=str(run_dir), DAEMON_READY_SECONDS=str(DAEMON_READY_SECONDS))
    tally = counts.setdefault(page, {"run": 0, "synopsis": 0, "skipped": 0})
    try:
        for block in blocks:
            if block.marker == "skip":
                tally["skipped"] += 1
                skips.append(f"{page}:{block.line}: {block.reason}")
            elif block.marker == "synopsis":
                tally["synopsis"] += 1
                problems += synopsis_problems(block, sluice)
            else:
                tally["run"] += 1
                problems += run_block(block, cwd, env, run_dir)
    finally:
        problems += [f"{page}: {p}" for p in stop_daemons(run_dir)]
        for path in reversed(OVERLAID):
            subprocess.run(["umount", path], check=True)
    return problems


def make_audit_store(cwd, env, sluice):
    """audit.db, the store the pages query: one receipt of a run that left an artifact,
    signed with audit.key (audit.pub beside it)."""
    for argv in (["audit", "keygen", "--out", "."],
                 ["run", "--audit", "audit.db", "--signing-key", "audit.key", "--policy",
                  "examples/workflows/data-analysis.yaml", "--", "sh", "-c",
                  "echo 42 > /output/answer"]):
        subprocess.run([sluice, *argv], cwd=cwd, env=env, check=True,
                       stdin=subprocess.DEVNULL, capture_output=True, timeout=120)


# ---------------------------------------------------------------- the namespace


def enter_namespace():
    """Re-runs this script in a private mount and network namespace (loopback only), so no
    block can reach another machine or change the host's /etc, /var/lib or /run."""
    if os.environ.get("DOCS_CHECK_IN_NAMESPACE") == "1":
        return
    env = dict(os.environ, DOCS_CHECK_IN_NAMESPACE="1")
    argv = ["unshare", "--mount", "--net", "--propagation", "private", "--",
            sys.executable, *sys.argv]
    os.execvpe("unshare", argv, env)


def overlay_system_paths(layers, source):
    """Fresh writable overlays over the paths the docs name, holding what an installed sluice
    has: /etc/sluice/policies (the example workflows) and /etc/sluice/secrets.yaml."""
    for path in OVERLAID:
        layer = layers / path.strip("/").replace("/", "_")
        (layer / "up").mkdir(parents=True)
        (layer / "work").mkdir()
        subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                        f"lowerdir={path},upperdir={layer}/up,workdir={layer}/work", path],
                       check=True)
    for leftover in ("/etc/sluice", "/var/lib/sluice", "/run/sluice"):
        shutil.rmtree(leftover, ignore_errors=True)  # whiteouts in the overlay only
    shutil.copytree(source / "examples" / "workflows", "/etc/sluice/policies")
    secrets = Path("/etc/sluice/secrets.yaml")
    secrets.write_text("stats_token: {value: docs-check-stand-in-token}\n")
    secrets.chmod(0o600)


def must_isolate():
    return os.environ.get("CI") == "true" or os.environ.get("SLUICE_REQUIRE_ISOLATION") == "1"


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    source, sluice = Path(sys.argv[1]).resolve(), str(Path(sys.argv[2]).resolve())
    pages = sys.argv[3:] or ["README.md"] + sorted(
        str(p.relative_to(source)) for p in (source / "docs").glob("*.md"))
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"):
        print("docs-check: needs root, unshare(1) and ip(8) (the blocks run sluice run)")
        return 1 if must_isolate() else 77
    enter_namespace()
    with tempfile.TemporaryDirectory(prefix="sluice-docs-") as tmp:
        scratch = Path(tmp)
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
        bin_dir = scratch / "bin"
        bin_dir.mkdir()
        (bin_dir / "sluice").symlink_to(sluice)
        env = dict(os.environ, PATH=f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}")
        counts, skips, problems = {}, [], []
        for page in pages:
            problems += run_page(page, source, scratch, env, sluice, counts, skips)
    return report(counts, skips, problems)


def report(counts, skips, problems):
    for p in problems:
        print(f"FAIL {p}\n")
    print("skipped blocks:")
    for s in skips:
        print(f"  {s}")
    print(f"{'page':<24} {'run':>4} {'synopsis':>9} {'skipped':>8}")
    for page, t in counts.items():
        print(f"{page:<24} {t['run']:>4} {t['synopsis']:>9} {t['skipped']:>8}")
    total = {k: sum(t[k] for t in counts.values()) for k in ("run", "synopsis", "skipped")}
    print(f"{'total':<24} {total['run']:>4} {total['synopsis']:>9} {total['skipped']:>8}")
    print(f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
