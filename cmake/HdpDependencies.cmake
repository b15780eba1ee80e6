# Every dependency comes from Debian's packages (scripts/install-deps.sh); nothing is vendored or downloaded.
# HDP_DEPS_ROOT: a folder Debian's packages were unpacked into (dpkg-deb -x), looked in before the
# system: scripts/gpu-check.sh's trainer stage on a machine without them. gpu-check.sh points the
# packages' .pc files at that folder; here: its prefix, Debian's serial HDF5 (no h5cc wrapper there, so
# FindHDF5 looks for the header and library), its pkg-config and protoc, and the linker's search for
# the libraries the unpacked ones load.
set(HDP_DEPS_ROOT "" CACHE PATH "Folder Debian packages were unpacked into (dpkg -x); empty: the system")
if(HDP_DEPS_ROOT)
  set(_hdp_deps_lib ${HDP_DEPS_ROOT}/usr/lib/x86_64-linux-gnu)
  list(PREPEND CMAKE_PREFIX_PATH ${HDP_DEPS_ROOT}/usr)
  set(HDF5_ROOT ${_hdp_deps_lib}/hdf5/serial)
  set(PKG_CONFIG_EXECUTABLE ${HDP_DEPS_ROOT}/usr/bin/pkgconf)
  set(ENV{PKG_CONFIG_LIBDIR} "${_hdp_deps_lib}/pkgconfig:${HDP_DEPS_ROOT}/usr/share/pkgconfig")
  set(Protobuf_PROTOC_EXECUTABLE ${HDP_DEPS_ROOT}/usr/bin/protoc)
  add_link_options("LINKER:-rpath-link,${_hdp_deps_lib}:${_hdp_deps_lib}/openblas-pthread:${HDP_DEPS_ROOT}/lib/x86_64-linux-gnu")
endif()
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
find_package(spdlog REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(CLI11 REQUIRED)
find_package(Boost 1.74 REQUIRED)
# TensorBoard's event files: protobuf messages (trainer/tensorboard.proto).
find_package(Protobuf REQUIRED)
find_package(HDF5 REQUIRED COMPONENTS C)
pkg_check_modules(HIREDIS REQUIRED IMPORTED_TARGET hiredis)
# 0.8.0: XXH3's output is stable from it on, and the data's order (trainer/data/permutation.h) and
# the checkpoints' checksums depend on it.
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash>=0.8.0)
pkg_check_modules(SYSTEMD REQUIRED IMPORTED_TARGET libsystemd)
# CPU compute: OpenMP for the kernel loops, OpenBLAS (cblas_sgemm) for the GEMMs.
find_package(OpenMP REQUIRED COMPONENTS CXX)
pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas)

if(HDP_BUILD_TESTS)
  find_package(GTest REQUIRED)
  find_program(HDP_REDIS_SERVER redis-server REQUIRED)
endif()
if(HDP_BUILD_BENCH)
  find_package(benchmark REQUIRED)
  # Gloo 0.5.0 is only bench/comm's baseline (its own ring allreduce) and bench_bootstrap's
  # (its full-mesh rendezvous); hdp's data plane no longer uses it (docs/data-plane.md).
  find_package(Gloo REQUIRED)
  # Gloo's Debian config names the library "gloo" without an include path on the target.
  if(TARGET gloo)
    set_target_properties(gloo PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${GLOO_INCLUDE_DIRS}")
  endif()
endif()
