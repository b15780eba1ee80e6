// File: kernels/cuda/check.h
//
// CUDA_CHECK / CUBLAS_CHECK: a failed CUDA runtime or cuBLAS call throws hdp::FatalError
// "[file:line] CUDA error <name>: <text> in <call>". Fatal, not recoverable: a CUDA error usually
// leaves the context unusable, so the trainer restarts the worker rather than retrying the call.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "common/stream.h"

namespace hdp::kernels::cuda {
// The CUDA stream behind hdp's opaque handle (null: the default stream).
inline cudaStream_t native(Stream stream) { return static_cast<cudaStream_t>(stream.handle); }
}  // namespace hdp::kernels::cuda

namespace hdp::kernels::cuda::detail {
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line);
}  // namespace hdp::kernels::cuda::detail

#define CUDA_CHECK(call)                                                                       \
  do {                                                                                         \
    const cudaError_t hdp_cuda_err_ = (call);                                                  \
    if (hdp_cuda_err_ != cudaSuccess)                                                          \
      ::hdp::kernels::cuda::detail::throw_cuda_error(hdp_cuda_err_, #call, __FILE__, __LINE__); \
  } while (0)

#define CUBLAS_CHECK(call)                                                                       \
  do {                                                                                           \
    const cublasStatus_t hdp_cublas_st_ = (call);                                                \
    if (hdp_cublas_st_ != CUBLAS_STATUS_SUCCESS)                                                 \
      ::hdp::kernels::cuda::detail::throw_cublas_error(hdp_cublas_st_, #call, __FILE__, __LINE__); \
  } while (0)
