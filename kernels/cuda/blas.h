// File: kernels/cuda/blas.h
//
// Row-major fp32 GEMM on the GPU through cuBLAS, same contract as kernels/cpu/blas.h:
// C = alpha * op(A) * op(B) + beta * C. One cuBLAS handle per host thread, created on first use, set to the given stream at each call.
#pragma once

#include <cstdint>

#include "common/stream.h"

namespace hdp::kernels::cuda {

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc, Stream stream);

void axpy(int64_t n, float alpha, const float* x, float* y, Stream stream);

}  // namespace hdp::kernels::cuda
