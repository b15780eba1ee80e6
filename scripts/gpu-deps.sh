#!/usr/bin/env bash
# Fetches the Debian packages the GPU subset builds against (cmake/HdpGpuDependencies.cmake) into
# .gpu-deps/, for a GPU machine that has CUDA but no apt and no network: scripts/gpu-check.sh unpacks
# them there. Run on a Debian 12 machine with apt (scripts/install-deps.sh's); .gpu-deps/ is not
# tracked (the packages are Debian's, fetched, never vendored).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .gpu-deps
grep -qxF '/.gpu-deps/' .git/info/exclude 2>/dev/null || { mkdir -p .git/info; echo '/.gpu-deps/' >>.git/info/exclude; }
cd .gpu-deps
# spdlog and fmt (hdp_common), OpenBLAS with its Fortran runtime (CPU references), GoogleTest,
# nlohmann-json and CLI11 (bench_gpu).
apt-get download libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 libopenblas-dev libopenblas-pthread-dev \
  libopenblas0-pthread libopenblas0 libgfortran5 libquadmath0 libgtest-dev libgmock-dev nlohmann-json3-dev \
  libcli11-dev
# NCCL's header, for a GPU machine whose NCCL (PyTorch's wheel) came without one; the library
# (200+ MB) is the GPU machine's own.
if [ -f /usr/local/cuda/include/nccl.h ]; then
  mkdir -p nccl && cp /usr/local/cuda/include/nccl.h nccl/
fi
ls -l
