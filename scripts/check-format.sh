#!/usr/bin/env bash
# Fails, naming each file, when a C++ source of the tree is not as clang-format (the repo's
# .clang-format) would write it. `make format` rewrites them. Run by ctest as `format_check`.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v clang-format >/dev/null; then
  echo "check-format: clang-format is not installed (scripts/install-deps.sh installs it)" >&2
  exit 1
fi
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.cpp' '*.hpp')
else
  mapfile -t files < <(find . -path ./build -prune -o \( -name '*.cpp' -o -name '*.hpp' \) -print)
fi
# One clang-format process for the whole tree; each finding starts with "FILE:LINE:COL: error".
mapfile -t bad < <(clang-format --dry-run --Werror "${files[@]}" 2>&1 |
  sed -n 's/^\([^:]*\):[0-9]*:[0-9]*: error: .*/\1/p' | sort -u)
if ((${#bad[@]} > 0)); then
  echo "check-format: ${#bad[@]} file(s) differ from clang-format; run 'make format':" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "check-format: ${#files[@]} files formatted"
