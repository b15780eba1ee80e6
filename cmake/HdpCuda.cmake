# Decides whether the CUDA parts are built (HDP_CUDA=AUTO|ON|OFF) and sets HDP_HAVE_CUDA / HDP_HAVE_NCCL.
# CUDA comes from HDP_CUDA_ROOT (/usr/local/cuda); NCCL from there too, or from HDP_NCCL_INCLUDE and
# HDP_NCCL_LIBRARY when it lives elsewhere (a pip wheel's nvidia/nccl). The kernels need CUDA alone;
# NCCL is found beside it when present. Nothing is downloaded.
set(HDP_HAVE_CUDA 0)
set(HDP_HAVE_NCCL 0)
set(HDP_CUDA_ROOT "/usr/local/cuda" CACHE PATH "CUDA toolkit root")

if(NOT HDP_CUDA STREQUAL "OFF")
  find_program(HDP_NVCC nvcc HINTS ${HDP_CUDA_ROOT}/bin NO_DEFAULT_PATH)
  if(HDP_NVCC)
    set(CMAKE_CUDA_COMPILER ${HDP_NVCC})
    # One architecture keeps CI fast (H100 = sm_90); override with -DCMAKE_CUDA_ARCHITECTURES.
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(HDP_HAVE_CUDA 1)
    find_path(HDP_NCCL_INCLUDE nccl.h HINTS ${HDP_CUDA_ROOT}/include)
    find_library(HDP_NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${HDP_CUDA_ROOT}/lib64 ${HDP_CUDA_ROOT}/lib)
    if(HDP_NCCL_INCLUDE AND HDP_NCCL_LIBRARY)
      set(HDP_HAVE_NCCL 1)
      # NCCL's headers only: the library is opened on first use (mesh/comm/nccl_api.h), from the
      # loader's search path, else from the directory it was found in here.
      add_library(hdp_nccl INTERFACE IMPORTED)
      get_filename_component(_hdp_nccl_dir "${HDP_NCCL_LIBRARY}" DIRECTORY)
      set_target_properties(hdp_nccl PROPERTIES
        INTERFACE_INCLUDE_DIRECTORIES ${HDP_NCCL_INCLUDE}
        INTERFACE_COMPILE_DEFINITIONS "HDP_NCCL_LIBRARY_DIR=\"${_hdp_nccl_dir}\"")
    endif()
    message(STATUS "hdp: CUDA ${CUDAToolkit_VERSION} found (NCCL: ${HDP_HAVE_NCCL}); CUDA parts are built for sm_${CMAKE_CUDA_ARCHITECTURES}")
  elseif(HDP_CUDA STREQUAL "ON")
    message(FATAL_ERROR "HDP_CUDA=ON but nvcc was not found under ${HDP_CUDA_ROOT}")
  else()
    message(STATUS "hdp: nvcc not found under ${HDP_CUDA_ROOT}; building without CUDA")
  endif()
endif()
