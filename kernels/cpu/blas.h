// File: kernels/cpu/blas.h
//
// The BLAS calls hdp needs, through OpenBLAS; float goes to the s-routines, double (the gradient
// checks) to the d-routines.
//   gemm: row-major C = alpha * op(A) * op(B) + beta * C, where op(X) is X or its transpose.
//   axpy: y += alpha * x over n elements (the residual adds).
//
// Threading: all CPU parallelism in hdp is OpenMP. OpenBLAS's own thread pool is switched off (its
// workers spin for a long time after each call and fought the OpenMP workers for the cores: a tiny
// model step ran 50x slower on 2 cores), and gemm instead splits C into row or column panels across
// the OpenMP threads, each panel one single-threaded OpenBLAS call. Inside a parallel region (the
// attention tiles) gemm runs on the calling thread only.
#pragma once

#include <cstdint>

namespace hdp::kernels::cpu {

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
          const T* b, int64_t ldb, T beta, T* c, int64_t ldc);

template <typename T>
void axpy(int64_t n, T alpha, const T* x, T* y);

// Makes OpenBLAS single-threaded (idempotent; every kernel entry point calls it). Exposed for the
// benchmark, which measures raw multi-threaded sgemm as its baseline and then calls this again.
void use_openmp_threading_only();

}  // namespace hdp::kernels::cpu
