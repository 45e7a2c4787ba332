#!/usr/bin/env python3
"""Keeps the command outputs in docs/policy.md true to the real `sluice` binary.

Every ```console block in docs/policy.md holds `$ sluice ...` lines followed by their output.
This script runs each command in a scratch copy of examples/ (plus the files the page defines
inline after a `<!-- file: PATH -->` marker) and compares the output.

  check_docs.py SOURCE_DIR SLUICE_BINARY            exit 1 and show every difference
  check_docs.py SOURCE_DIR SLUICE_BINARY --update   rewrite the outputs in place

Run --update after changing a diagnostic or explain text, and review the diff.
"""
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

FILE_RE = re.compile(r"<!-- file: (\S+) -->\n```yaml\n(.*?)```", re.S)
CONSOLE_RE = re.compile(r"(```console\n)(.*?)(```)", re.S)


def run(binary, workdir, command):
    # `$ sluice policy ...` -> the real binary; globs are expanded by the shell.
    shell_cmd = f"{binary} {command[len('sluice '):]}"
    p = subprocess.run(shell_cmd, shell=True, cwd=workdir, capture_output=True, text=True,
                       timeout=60, stdin=subprocess.DEVNULL)
    return (p.stdout + p.stderr).rstrip("\n"), p.returncode


def render_block(body, binary, workdir, problems):
    """Returns the block with each `$ sluice` command's output replaced by the real one."""
    out, lines, i = [], body.rstrip("\n").split("\n"), 0
    last_rc = None
    while i < len(lines):
        line = lines[i]
        i += 1
        if line.startswith("$ sluice "):
            expected = []
            while i < len(lines) and not lines[i].startswith("$ "):
                expected.append(lines[i])
                i += 1
            got, last_rc = run(binary, workdir, line[2:])
            if "\n".join(expected) != got:
                problems.append((line, "\n".join(expected), got))
            out.append(line)
            if got:
                out.append(got)
        elif line == "$ echo $?":
            out.append(line)
            if i < len(lines) and not lines[i].startswith("$ "):
                if lines[i] != str(last_rc):
                    problems.append((line, lines[i], str(last_rc)))
                i += 1
            out.append(str(last_rc))
        else:
            out.append(line)
    return "\n".join(out) + "\n"


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    source, binary = Path(sys.argv[1]), str(Path(sys.argv[2]).resolve())
    update = "--update" in sys.argv[3:]
    doc_path = source / "docs" / "policy.md"
    doc = doc_path.read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory(prefix="sluice-docs-") as tmp:
        work = Path(tmp)
        shutil.copytree(source / "examples", work / "examples",
                        ignore=shutil.ignore_patterns("demo*"))
        for rel, text in FILE_RE.findall(doc):
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            (work / rel).write_text(text, encoding="utf-8")
        problems = []
        new_doc = CONSOLE_RE.sub(
            lambda m: m.group(1) + render_block(m.group(2), binary, work, problems) + m.group(3),
            doc)
    if update:
        if new_doc != doc:
            doc_path.write_text(new_doc, encoding="utf-8")
        print(f"updated {len(problems)} output(s) in {doc_path}")
        return 0
    for cmd, want, got in problems:
        print(f"DIFFERS: {cmd}\n--- docs/policy.md\n{want}\n--- sluice\n{got}\n")
    checked = len(re.findall(r"^\$ ", doc, re.M))
    print(f"{checked - len(problems)} passed, {len(problems)} failed")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
