#!/usr/bin/env bash
# The .deb on this machine, as an administrator would use it: dpkg -i, the installed files and
# state, `sluice --version`, `sluice policy check`/`test` on the installed examples, one
# `sluice run`, then dpkg --purge and nothing left behind (files, group, state directories).
#
#   dpkg_roundtrip.sh DEB
#
# Needs root and dpkg; without them it skips (77), except under CI=true, where it fails. It
# refuses to run (exit 1) where a sluice package, group or state directory already exists, so
# it never replaces or deletes anything it did not make.
set -euo pipefail

deb=${1:?usage: dpkg_roundtrip.sh DEB}
installed=0

skip_or_fail() {
  echo "dpkg_roundtrip: $1" >&2
  [[ ${CI:-} == true ]] && exit 1
  exit 77
}
fail() {
  echo "dpkg_roundtrip: FAIL: $1" >&2
  exit 1
}
cleanup() {
  ((installed)) && dpkg --purge sluice >/dev/null 2>&1 || true
}
trap cleanup EXIT

# The owner, group and mode of a path: "root:sluice 750".
owner_mode() { stat -c '%U:%G %a' "$1"; }

preconditions() {
  [[ $(id -u) == 0 ]] || skip_or_fail "needs root (dpkg -i on this machine)"
  command -v dpkg >/dev/null || skip_or_fail "needs dpkg"
  [[ -f $deb ]] || fail "no package at $deb (the package.deb fixture makes it)"
  if [[ $(dpkg-query -W -f='${Status}' sluice 2>/dev/null) == *installed* ]]; then
    fail "a sluice package is already installed here; remove it first"
  fi
  getent group sluice >/dev/null && fail "a group 'sluice' already exists here"
  # /run/sluice is not checked: `sluice run` makes it too (it stages mounts there).
  for d in /var/lib/sluice /etc/sluice /usr/share/sluice; do
    [[ -e $d ]] && fail "$d already exists here"
  done
  return 0
}

check_installed_layout() {
  [[ -x /usr/bin/sluice ]] || fail "/usr/bin/sluice missing"
  # Stripped: no symbol table left (the build's binary has one, and debug info).
  local sections
  sections=$(readelf -S /usr/bin/sluice)
  grep -q '\.symtab' <<<"$sections" && fail "/usr/bin/sluice is not stripped"
  getent group sluice >/dev/null || fail "postinst made no group sluice"
  [[ $(owner_mode /var/lib/sluice) == "root:root 700" ]] ||
    fail "/var/lib/sluice is $(owner_mode /var/lib/sluice), want root:root 700"
  [[ $(owner_mode /run/sluice) == "root:sluice 750" ]] ||
    fail "/run/sluice is $(owner_mode /run/sluice), want root:sluice 750"
  [[ $(owner_mode /etc/sluice/policies) == "root:sluice 750" ]] ||
    fail "/etc/sluice/policies is $(owner_mode /etc/sluice/policies), want root:sluice 750"
  for unit in sluice.service sluice.socket; do
    [[ -f /usr/lib/systemd/system/$unit ]] || fail "$unit not installed"
  done
  # As installed, man pages included (Documentation=man:sluice-serve(1)); verify exits 0 even
  # on an unknown key, so its output is the verdict.
  local verify
  verify=$(systemd-analyze verify /usr/lib/systemd/system/sluice.service \
    /usr/lib/systemd/system/sluice.socket 2>&1) || fail "systemd-analyze verify: $verify"
  [[ -z $verify ]] || fail "systemd-analyze verify complained: $verify"
  grep -q '^ExecStart=/usr/bin/sluice serve' /usr/lib/systemd/system/sluice.service ||
    fail "sluice.service does not start /usr/bin/sluice"
  # One man page per command, real roff that man renders. Read from the package itself: an
  # image whose dpkg excludes /usr/share/man (path-exclude, as slim containers do) has none.
  # (Whole outputs are captured first: grep -q ending a pipe early fails it under pipefail.)
  local listing page
  listing=$(dpkg-deb -c "$deb")
  grep -q '/usr/share/man/man1/sluice-policy-check\.1$' <<<"$listing" ||
    fail "no man page for policy check in the package"
  page=$(dpkg-deb --fsys-tarfile "$deb" | tar -xO ./usr/share/man/man1/sluice-run.1 |
    man -l - 2>/dev/null)
  grep -q -- '--policy-dir' <<<"$page" || fail "man -l sluice-run.1 does not show --policy-dir"
  # The completion offers the commands and a command's flags.
  local words
  words=$(bash -c 'source /usr/share/bash-completion/completions/sluice
    COMP_WORDS=(sluice serve --li); COMP_CWORD=2; _sluice; echo "${COMPREPLY[*]}"')
  [[ $words == --listen ]] || fail "completion of 'sluice serve --li' gave '$words'"
}

check_first_run() {
  local version examples=/usr/share/sluice/examples out
  version=$(/usr/bin/sluice --version)
  [[ $version == "sluice "* ]] || fail "sluice --version printed '$version'"
  out=$(/usr/bin/sluice policy check "$examples/workflows" 2>&1) ||
    fail "policy check of the installed examples: $out"
  grep -qi warning <<<"$out" && fail "policy check warned: $out"
  for t in "$examples"/policy-tests/*.yaml; do
    (cd "$examples/policy-tests" && /usr/bin/sluice policy test "$t" >/dev/null) ||
      fail "policy test $t"
  done
  out=$(cd / && /usr/bin/sluice run --policy "$examples/workflows/data-analysis.yaml" \
    --audit "" -- /bin/echo installed-and-running 2>/dev/null) || fail "sluice run failed"
  [[ $out == installed-and-running ]] || fail "sluice run printed '$out'"
}

check_purged() {
  local files=$1 left=()
  while read -r f; do
    [[ -e $f || -L $f ]] && left+=("$f")
  done <<<"$files"
  ((${#left[@]} == 0)) || fail "left after purge: ${left[*]}"
  getent group sluice >/dev/null && fail "group sluice left after purge"
  for d in /var/lib/sluice /run/sluice /etc/sluice /usr/share/sluice; do
    [[ -e $d ]] && fail "$d left after purge"
  done
  return 0
}

preconditions
# The package's own files (not its directories, which may be shared: /usr/bin, ...).
files=$(dpkg-deb -c "$deb" | awk '$1 !~ /^d/ {sub(/^\./, "", $6); print $6}')
installed=1
dpkg -i "$deb" >/dev/null || fail "dpkg -i $deb"
check_installed_layout
check_first_run
dpkg --purge sluice >/dev/null || fail "dpkg --purge sluice"
installed=0
check_purged "$files"
echo "dpkg_roundtrip: ok ($(stat -c %s "$deb") bytes; installed, ran, purged clean)"
