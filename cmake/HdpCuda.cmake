# Decides whether the CUDA parts are built (HDP_CUDA=AUTO|ON|OFF) and sets HDP_HAVE_CUDA / HDP_HAVE_NCCL.
# CUDA and NCCL come from /usr/local/cuda; nothing is downloaded.
set(HDP_HAVE_CUDA 0)
set(HDP_HAVE_NCCL 0)
set(HDP_CUDA_ROOT "/usr/local/cuda" CACHE PATH "CUDA toolkit root")

if(NOT HDP_CUDA STREQUAL "OFF")
  find_program(HDP_NVCC nvcc HINTS ${HDP_CUDA_ROOT}/bin NO_DEFAULT_PATH)
  find_path(HDP_NCCL_INCLUDE nccl.h HINTS ${HDP_CUDA_ROOT}/include)
  find_library(HDP_NCCL_LIBRARY nccl HINTS ${HDP_CUDA_ROOT}/lib64 ${HDP_CUDA_ROOT}/lib)
  if(HDP_NVCC AND HDP_NCCL_INCLUDE AND HDP_NCCL_LIBRARY)
    set(CMAKE_CUDA_COMPILER ${HDP_NVCC})
    # One architecture keeps CI fast (H100 = sm_90); override with -DCMAKE_CUDA_ARCHITECTURES.
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(HDP_HAVE_CUDA 1)
    set(HDP_HAVE_NCCL 1)
    add_library(hdp_nccl UNKNOWN IMPORTED)
    set_target_properties(hdp_nccl PROPERTIES
      IMPORTED_LOCATION ${HDP_NCCL_LIBRARY}
      INTERFACE_INCLUDE_DIRECTORIES ${HDP_NCCL_INCLUDE})
    message(STATUS "hdp: CUDA ${CUDAToolkit_VERSION} and NCCL found; CUDA parts are built for sm_${CMAKE_CUDA_ARCHITECTURES}")
  elseif(HDP_CUDA STREQUAL "ON")
    message(FATAL_ERROR "HDP_CUDA=ON but nvcc or NCCL was not found under ${HDP_CUDA_ROOT}")
  else()
    message(STATUS "hdp: nvcc or NCCL not found under ${HDP_CUDA_ROOT}; building without CUDA")
  endif()
endif()
