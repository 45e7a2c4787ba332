#!/usr/bin/env python3
"""Man pages and bash completion for `sluice`, generated from its own `--help`.

  gen_cli_docs.py SLUICE VERSION MAN_DIR COMPLETION_FILE

Walks the command tree (the "Subcommands:" of each `--help`), writes one roff page per
command with help2man (sluice.1, sluice-policy.1, sluice-policy-check.1, ...) and one bash
completion script naming every command and its flags. Run at build time (packaging/), so
the pages can never drift from the binary.
"""
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

# CLI11's help: a section heading at column 0 ("Options:"), entries indented by two spaces.
# The first word is the name or the flags ("-h,--help"), then maybe "TEXT ... REQUIRED".
ENTRY_RE = re.compile(r"^  (\S+)(?:[^ ]| \S)*(?:\s{2,}(.*))?$")
ROOT_SUMMARY = "run generated code in a sandbox whose only way out is a policy-checked proxy"


def help_text(sluice, path):
    """`sluice PATH... --help`, with the program named `sluice` (not the build path)."""
    out = subprocess.run(["bash", "-c", 'exec -a sluice "$@"', "-", sluice, *path, "--help"],
                         capture_output=True, text=True, check=True)
    return out.stdout


def sections(text):
    """{heading: [(first column, description)]} of one help text."""
    found, current = {}, None
    for line in text.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            current = found.setdefault(line[:-1], [])
        elif current is not None and (m := ENTRY_RE.match(line)):
            current.append((m.group(1), m.group(2) or ""))
    return found


def walk(sluice, path=(), summary=ROOT_SUMMARY):
    """[(path, summary, flags, subcommands)] for the command at `path` and all below it."""
    parsed = sections(help_text(sluice, path))
    flags = []
    for column, _ in parsed.get("Options", []):
        flags += [f for f in column.split(",") if f.startswith("-")]
    subs = parsed.get("Subcommands", [])
    nodes = [(path, summary, flags, [name for name, _ in subs])]
    for name, sub_summary in subs:
        nodes += walk(sluice, (*path, name), sub_summary)
    return nodes


def man_page(sluice, version, path, summary, out_dir):
    """One page via help2man, run on a wrapper that is `sluice PATH...`."""
    name = "-".join(("sluice", *path))
    with tempfile.TemporaryDirectory() as tmp:
        wrapper = Path(tmp) / name
        wrapper.write_text("#!/bin/bash\nexec -a sluice %s %s \"$@\"\n" %
                           (shlex.quote(sluice), " ".join(map(shlex.quote, path))))
        wrapper.chmod(0o755)
        roff = subprocess.run(["help2man", "--no-info", "--no-discard-stderr", "--section=1",
                               "--version-string=sluice " + version, "--name=" + summary,
                               str(wrapper)], capture_output=True, text=True, check=True).stdout
    # help2man names the page after the program it ran as (`sluice`); each page is its command.
    title = name.upper().replace("-", "\\-")
    roff = re.sub(r'^\.TH SLUICE ', ".TH %s " % title, roff, count=1, flags=re.M)
    roff = re.sub(r"^sluice \\- ", name.replace("-", "\\-") + " \\- ", roff, count=1, flags=re.M)
    if path:
        roff += ".SH \"SEE ALSO\"\n.BR sluice (1)\n"
    (Path(out_dir) / (name + ".1")).write_text(roff)


def completion(nodes):
    """A bash completion function: the command path typed so far picks the words offered."""
    subs = "\n".join("  [%s]=%s" % (shlex.quote(" ".join(("sluice", *p))), shlex.quote(" ".join(s)))
                     for p, _, _, s in nodes)
    flags = "\n".join("  [%s]=%s" % (shlex.quote(" ".join(("sluice", *p))), shlex.quote(" ".join(f)))
                      for p, _, f, _ in nodes)
    return f"""# bash completion for sluice (generated from `sluice --help` by packaging/gen_cli_docs.py)
_sluice() {{
  local -A subs=(
{subs}
  )
  local -A flags=(
{flags}
  )
  local cur=${{COMP_WORDS[COMP_CWORD]}} path=sluice i w
  # The command path: each word that names a subcommand of the path so far.
  for ((i = 1; i < COMP_CWORD; i++)); do
    w=${{COMP_WORDS[i]}}
    [[ $w == -- ]] && {{ COMPREPLY=($(compgen -c -- "$cur")); return; }}
    if [[ " ${{subs[$path]}} " == *" $w "* ]]; then path="$path $w"; fi
  done
  if [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "${{flags[$path]}}" -- "$cur"))
  elif [[ -n ${{subs[$path]}} ]]; then
    COMPREPLY=($(compgen -W "${{subs[$path]}}" -- "$cur"))
  else
    COMPREPLY=($(compgen -f -- "$cur"))
  fi
}}
complete -o filenames -F _sluice sluice
"""


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    sluice, version, man_dir, completion_file = sys.argv[1:]
    sluice = os.path.abspath(sluice)
    nodes = walk(sluice)
    Path(man_dir).mkdir(parents=True, exist_ok=True)
    for path, summary, _, _ in nodes:
        man_page(sluice, version, path, summary, man_dir)
    Path(completion_file).write_text(completion(nodes))


if __name__ == "__main__":
    main()
