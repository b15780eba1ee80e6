// File: kernels/cuda/blas.h
//
// Row-major GEMMs on the GPU through cuBLAS (fp32, and bf16 operands into fp32), same contract as kernels/cpu/blas.h:
// C = alpha * op(A) * op(B) + beta * C. One cuBLAS handle per host thread, created on first use, set to the given stream at each call.
#pragma once

#include <cstdint>

#include "common/stream.h"

namespace hdp::kernels::cuda {

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc, Stream stream);

// The same with bf16 operands (16-bit patterns) and an fp32 C: cublasGemmEx with fp32 accumulation
// (CUBLAS_COMPUTE_32F), on the tensor cores. Mixed precision's GEMMs (ops/linear.h).
void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
               int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc, Stream stream);

void axpy(int64_t n, float alpha, const float* x, float* y, Stream stream);

}  // namespace hdp::kernels::cuda
