#include "kernels/cpu/blas.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>

namespace hdp::kernels::cpu {
namespace {

CBLAS_TRANSPOSE op(bool t) { return t ? CblasTrans : CblasNoTrans; }

void call(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, op(ta), op(tb), int(m), int(n), int(k), alpha, a, int(lda), b, int(ldb), beta, c,
              int(ldc));
}

void call(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
          const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, op(ta), op(tb), int(m), int(n), int(k), alpha, a, int(lda), b, int(ldb), beta, c,
              int(ldc));
}

// Below this many multiply-adds a split costs more than it saves.
constexpr int64_t kSplitMinWork = int64_t(1) << 18;
// Panels are multiples of this many rows/columns so each call keeps OpenBLAS's full register blocks.
constexpr int64_t kPanelAlign = 16;

}  // namespace

void use_openmp_threading_only() {
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
}

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
          const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  use_openmp_threading_only();
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  if (threads == 1 || m * n * k < kSplitMinWork) {
    call(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  // Split the longer side of C. Rows of C are rows of op(A): row i starts at a + i*lda, or at
  // column i (a + i) when A is stored transposed; columns of C likewise select op(B)'s columns.
  const bool split_rows = m >= n;
  const int64_t len = split_rows ? m : n;
  const int64_t panel = (len / threads + kPanelAlign - 1) / kPanelAlign * kPanelAlign;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int t = 0; t < threads; ++t) {
    const int64_t s = std::min(len, t * panel), e = std::min(len, s + panel);
    if (s >= e) continue;
    if (split_rows)
      call(trans_a, trans_b, e - s, n, k, alpha, trans_a ? a + s : a + s * lda, lda, b, ldb, beta, c + s * ldc, ldc);
    else
      call(trans_a, trans_b, m, e - s, k, alpha, a, lda, trans_b ? b + s * ldb : b + s, ldb, beta, c + s, ldc);
  }
}

template <>
void axpy<float>(int64_t n, float alpha, const float* x, float* y) {
  use_openmp_threading_only();
  cblas_saxpy(static_cast<int>(n), alpha, x, 1, y, 1);
}

template <>
void axpy<double>(int64_t n, double alpha, const double* x, double* y) {
  use_openmp_threading_only();
  cblas_daxpy(static_cast<int>(n), alpha, x, 1, y, 1);
}

template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t,
                          float, float*, int64_t);
template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t, const double*,
                           int64_t, double, double*, int64_t);

}  // namespace hdp::kernels::cpu
