# Every dependency comes from Debian's packages (scripts/install-deps.sh); nothing is vendored or downloaded.
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
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)
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
