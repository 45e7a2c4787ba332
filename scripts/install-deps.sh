#!/usr/bin/env bash
# Installs every Debian 12 package that sluice's build, tests, demo and benchmarks need.
# Idempotent and quiet when everything is already there.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git python3 curl
  libboost-dev libboost-system-dev libboost-context-dev
  libssl-dev openssl ca-certificates
  libre2-dev libyaml-cpp-dev libsqlite3-dev sqlite3 libspdlog-dev libfmt-dev
  nlohmann-json3-dev libcli11-dev libseccomp-dev nftables
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  iproute2 procps util-linux
  python3-jsonschema python3-yaml
  clang-format
  nodejs
  # The everyday battery (tests/integration/everyday_test.cpp) runs these in the sandbox.
  make gcc libc6-dev python3-venv tar gzip findutils sed grep mawk debianutils
  # Credentials and protocols at the proxy: HTTP/2 (nghttp2 library, nghttp/nghttpd clients),
  # SigV4 (the AWS CLI and botocore's signer as the verifying upstream), WebSocket clients.
  libnghttp2-dev nghttp2-client nghttp2-server awscli python3-botocore python3-websockets
  # Packaging and deployment (docs/deploy.md): man pages from --help, the .deb (dpkg-dev's
  # dpkg-shlibdeps; man-db renders the pages in its test), the units (systemd-analyze,
  # systemd-socket-activate), the Helm chart rendered by Go text/template with sprig.
  help2man dpkg-dev fakeroot man-db binutils systemd golang-go golang-github-masterminds-sprig-dev
  # Central audit store: libpq for `audit ship`/verify, the server for its tests' throwaway cluster.
  libpq-dev postgresql
  # OTLP export test (tests/otlp/): protoc compiles the opentelemetry-proto files it checks against.
  protobuf-compiler python3-protobuf
)
# npm: Debian's package, unless the installed nodejs already ships its own npm (NodeSource's
# does, and conflicts with Debian's npm package).
if ! command -v npm >/dev/null; then
  PACKAGES+=(npm)
fi
if [[ "${SLUICE_BENCH_DEPS:-0}" == 1 ]]; then
  # squid-openssl: Squid built with OpenSSL (Debian's squid is the GnuTLS flavour and cannot
  # ssl-bump), the plain and ssl-bump peer of proxy_vs_squid.sh and tls_vs_passthrough.sh.
  PACKAGES+=(hyperfine wrk squid-openssl nginx-light bubblewrap time)
fi
if [[ "${SLUICE_FUZZ_DEPS:-0}" == 1 ]]; then
  PACKAGES+=(clang-16 libclang-rt-16-dev libfuzzer-16-dev)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} == 0)); then
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "install-deps: missing packages: ${missing[*]} (run as root, or install them)" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
