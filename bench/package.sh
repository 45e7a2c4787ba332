#!/usr/bin/env bash
# The .deb's size and the time from `dpkg -i` to the end of the first `sluice run` (docs/deploy.md).
#
#   bench/package.sh [BUILD_DIR]     # default build/; makes the .deb with cpack when missing
#
# Installs the package on this machine and purges it again: run as root, where no sluice
# package is installed (it stops otherwise). Prints the figures; judges nothing.
set -euo pipefail

build=$(realpath "${1:-build}")
[[ $(id -u) == 0 ]] || { echo "package.sh: needs root (dpkg -i)" >&2; exit 1; }
if [[ $(dpkg-query -W -f='${Status}' sluice 2>/dev/null) == *installed* ]]; then
  echo "package.sh: a sluice package is already installed; remove it first" >&2
  exit 1
fi
out=$(mktemp -d)
trap 'dpkg --purge sluice >/dev/null 2>&1 || true; rm -rf "$out"' EXIT
(cd "$build" && cpack -G DEB -B "$out" -D CPACK_DEBIAN_FILE_NAME=sluice-bench.deb >/dev/null)
deb=$out/sluice-bench.deb

start=$(date +%s%N)
dpkg -i "$deb" >/dev/null
(cd / && /usr/bin/sluice run --policy /usr/share/sluice/examples/workflows/data-analysis.yaml \
  --audit "" -- /bin/true 2>/dev/null)
end=$(date +%s%N)

printf 'package size:              %d bytes (%s)\n' "$(stat -c %s "$deb")" \
  "$(du -h "$deb" | cut -f1)"
printf 'installed size:            %s KiB\n' "$(dpkg-deb -f "$deb" Installed-Size)"
printf 'install to first run:      %d ms (dpkg -i + first sluice run)\n' \
  $(((end - start) / 1000000))
