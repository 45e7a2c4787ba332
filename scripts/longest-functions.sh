#!/usr/bin/env bash
# The longest functions outside tests, measured with Universal Ctags (line to end line).
# Usage: scripts/longest-functions.sh [N]  (default 10). The bar: none over 100 lines.
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-10}"
ctags --fields=+ne -o - -R --languages=C++ --c++-kinds=f \
  audit base cli execution policy proxy runner serve |
  awk -F'\t' '{
    start = ""; end = "";
    for (i = 4; i <= NF; i++) {
      if ($i ~ /^line:/) start = substr($i, 6);
      if ($i ~ /^end:/) end = substr($i, 5);
    }
    if (start != "" && end != "") printf "%5d  %s:%s  %s\n", end - start + 1, $2, start, $1;
  }' |
  sort -rn | head -n "$n"
