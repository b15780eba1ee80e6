# The libraries the GPU subset (HDP_GPU_ONLY) needs beside CUDA: spdlog (with fmt), OpenMP, OpenBLAS,
# GoogleTest, and nlohmann-json and CLI11 for bench_gpu. scripts/gpu-check.sh unpacks Debian's packages of them into a folder and passes it
# as HDP_DEPS_ROOT; without it they are looked for where the system keeps them.
set(HDP_DEPS_ROOT "" CACHE PATH "Folder Debian packages were unpacked into (dpkg -x); empty: the system")
if(HDP_DEPS_ROOT)
  list(PREPEND CMAKE_PREFIX_PATH ${HDP_DEPS_ROOT}/usr ${HDP_DEPS_ROOT}/usr/lib/x86_64-linux-gnu/cmake)
endif()
find_package(Threads REQUIRED)
find_package(spdlog REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(GTest REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(CLI11 REQUIRED)

# Debian installs OpenBLAS's header and library under an alternatives folder (openblas-pthread/) and
# points pkg-config at it through a symlink that dpkg -x does not create: look in that folder directly.
set(_hdp_blas_hints ${HDP_DEPS_ROOT}/usr/include/x86_64-linux-gnu/openblas-pthread
                    /usr/include/x86_64-linux-gnu/openblas-pthread /usr/include/openblas)
find_path(HDP_CBLAS_INCLUDE cblas.h HINTS ${_hdp_blas_hints})
find_library(HDP_OPENBLAS_LIBRARY NAMES openblas
  HINTS ${HDP_DEPS_ROOT}/usr/lib/x86_64-linux-gnu/openblas-pthread /usr/lib/x86_64-linux-gnu/openblas-pthread)
if(NOT HDP_CBLAS_INCLUDE OR NOT HDP_OPENBLAS_LIBRARY)
  message(FATAL_ERROR "OpenBLAS (cblas.h, libopenblas) not found; HDP_DEPS_ROOT='${HDP_DEPS_ROOT}'")
endif()
# The same target name the full build gets from pkg_check_modules, so kernels/ links it unchanged.
add_library(PkgConfig::OPENBLAS INTERFACE IMPORTED)
set_target_properties(PkgConfig::OPENBLAS PROPERTIES
  INTERFACE_INCLUDE_DIRECTORIES ${HDP_CBLAS_INCLUDE} INTERFACE_LINK_LIBRARIES ${HDP_OPENBLAS_LIBRARY})
