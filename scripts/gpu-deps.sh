#!/usr/bin/env bash
# Fetches the Debian packages hdp builds against into .gpu-deps/, for a GPU machine that has CUDA but
# no apt and no network: scripts/gpu-check.sh unpacks them there. Run on a Debian 12 machine with apt
# (scripts/install-deps.sh's); .gpu-deps/ is ignored (.gitignore) (the packages are Debian's, fetched, never
# vendored). Two sets:
#   - the GPU subset's (cmake/HdpGpuDependencies.cmake: gpu-check.sh's `kernels` stage);
#   - the full build's with -DHDP_BUILD_BENCH=OFF (cmake/HdpDependencies.cmake: the `trainer` stage,
#     which builds `hdp` and nccl_gpu_test) and redis-server, each with the shared libraries they
#     load that a machine with CUDA and PyTorch may lack (libcurl and what it loads, for HDF5).
# Only packages' files are used (dpkg-deb -x): no maintainer script runs, nothing is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .gpu-deps
cd .gpu-deps
# The GPU subset: spdlog and fmt (hdp_common), OpenBLAS with its Fortran runtime (CPU references),
# GoogleTest, nlohmann-json and CLI11 (bench_gpu).
gpu_subset=(libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 libopenblas-dev libopenblas-pthread-dev
  libopenblas0-pthread libopenblas0 libgfortran5 libquadmath0 libgtest-dev libgmock-dev nlohmann-json3-dev
  libcli11-dev)
# The full build beside those: Boost's headers (Asio), protobuf and protoc (TensorBoard's event
# files), HDF5 (checkpoints), hiredis, xxhash, libsystemd, SentencePiece (the tokenizer), and pkg-config
# (pkgconf) to find the last five. Boost: libboost1.74-dev alone (headers and CMake config, 9.5 MB); no Boost library is linked.
full_build=(libboost1.74-dev libprotobuf-dev libprotobuf32 libprotobuf-lite32 protobuf-compiler libprotoc32
  libhdf5-dev libhdf5-103-1 libhdf5-hl-100 libsz2 libaec0 libhiredis-dev libhiredis0.14 libxxhash-dev libxxhash0
  libsystemd-dev libsystemd0 libsentencepiece-dev libsentencepiece0 pkgconf pkgconf-bin libpkgconf3)
# redis-server (its binary is in redis-tools) and what it loads beyond libc.
redis=(redis-server redis-tools libjemalloc2 liblzf1 libatomic1)
# Shared libraries the above load (ldd of hdp, protoc and redis-server on Debian 12) that are not
# libc, libstdc++ or libgcc: HDF5's libcurl and its TLS, Kerberos and LDAP stack; libsystemd's.
runtime=(libcurl4 libnghttp2-14 librtmp1 libssh2-1 libpsl5 libldap-2.5-0 libsasl2-2 libbrotli1 libgssapi-krb5-2
  libkrb5-3 libk5crypto3 libkrb5support0 libkeyutils1 libcom-err2 libgnutls30 libhogweed6 libnettle8 libgmp10
  libidn2-0 libunistring2 libp11-kit0 libtasn1-6 libffi8 libssl3 libcap2 libgcrypt20 libgpg-error0 liblz4-1
  liblzma5 libzstd1 zlib1g)
apt-get download "${gpu_subset[@]}" "${full_build[@]}" "${redis[@]}" "${runtime[@]}"
# NCCL's header, for a GPU machine whose NCCL (PyTorch's wheel) came without one; the library
# (200+ MB) is the GPU machine's own.
if [ -f /usr/local/cuda/include/nccl.h ]; then
  mkdir -p nccl && cp /usr/local/cuda/include/nccl.h nccl/
fi
ls -l
du -sh .
