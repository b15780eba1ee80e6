// File: kernels/cuda/cublas_api.h
//
// The cuBLAS functions hdp calls, from libcublas opened on first use (common/shared_library.h)
// instead of linked: every `hdp` process would otherwise map and relocate cuBLAS and cuBLASLt
// (about 700 MB) at start, GPU or not. The one file that names cuBLAS's library; kernels/cuda/
// calls cuBLAS through cublas() only.
#pragma once

#include <cublas_v2.h>

namespace hdp::kernels::cuda {

// cublasGemmEx as libcublas exports it (cuBLAS's header adds an inline C++ overload taking the
// compute type as a cudaDataType, so the name alone does not say which).
using CublasGemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                        const void*, const void*, cudaDataType, int, const void*, cudaDataType, int,
                                        const void*, void*, cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);

struct CublasApi {
  decltype(&cublasCreate) create;
  decltype(&cublasDestroy) destroy;
  decltype(&cublasSetStream) set_stream;
  decltype(&cublasSgemm) sgemm;
  CublasGemmEx gemm_ex;
  decltype(&cublasSaxpy) saxpy;
  decltype(&cublasGetStatusName) status_name;
  decltype(&cublasGetStatusString) status_string;
};

// Loaded once, thread-safe; FatalError naming the library (and what was tried) when it cannot be.
const CublasApi& cublas();

}  // namespace hdp::kernels::cuda
