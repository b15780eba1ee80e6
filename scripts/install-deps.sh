#!/usr/bin/env bash
# Installs every build, test and run-time dependency of hdp from Debian's archive.
# Idempotent: a second run installs nothing new. Needs root (or sudo).
#   --bench  also what the benchmarks run by hand need beyond that (not the tests, not CI):
#            python3-torch, torchrun's side of bench_goodput (docs/performance.md)
set -euo pipefail

with_bench=0
for arg in "$@"; do
  case "$arg" in
    --bench) with_bench=1 ;;
    *) echo "install-deps: unknown argument '$arg' (known: --bench)" >&2; exit 2 ;;
  esac
done

packages=(
  build-essential cmake ninja-build ccache pkg-config git
  libgloo-dev libhiredis-dev libhdf5-dev hdf5-tools libboost-dev
  libspdlog-dev libfmt-dev googletest libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas-dev nlohmann-json3-dev libcli11-dev libxxhash-dev
  libsystemd-dev systemd redis-server redis-tools procps
  iproute2 util-linux
  libprotobuf-dev protobuf-compiler python3 python3-protobuf python3-crc32c
  prometheus chromium python3-websocket python3-numpy
  libsentencepiece-dev sentencepiece
)
# The local Slurm cluster of the system tests; optional (those tests skip without it).
optional_packages=(slurm-wlm munge)
# bench_goodput's torchrun baseline (--bench only): about 1 GB installed.
bench_packages=(python3-torch)
[ "$with_bench" -eq 1 ] || bench_packages=()

sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)

missing=()
for p in "${packages[@]}" "${optional_packages[@]}" "${bench_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all packages present"
  exit 0
fi

export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y --no-install-recommends "${packages[@]}"
# Slurm is only needed by the `system` tests; a machine that cannot install it still builds and tests the rest.
"${sudo_cmd[@]}" apt-get install -y --no-install-recommends "${optional_packages[@]}" \
  || echo "install-deps: slurm-wlm/munge unavailable; system tests will skip" >&2
if [ ${#bench_packages[@]} -gt 0 ]; then
  "${sudo_cmd[@]}" apt-get install -y --no-install-recommends "${bench_packages[@]}"
fi
echo "install-deps: done"
