#include "ops/linear.h"

#include "kernels/cpu/blas.h"
#include "kernels/cuda/blas.h"
#include "ops/check.h"
#include "ops/dispatch.h"

namespace hdp::ops {
namespace {

void check_input(const char* op, const Tensor& x, const Tensor& weight) {
  detail::expect_compute(op, "x", x);
  detail::expect_rank(op, "x", x, 2);
  detail::expect_like(op, "weight", weight, x);
  detail::expect_rank(op, "weight", weight, 2);
  detail::expect(weight.dim(1) == x.dim(1), op,
                 "x " + x.describe() + " and weight " + weight.describe() + " disagree on in_features");
}

// Runs `body(tag, gemm)` with the row-major GEMM of x's device and dtype: gemm(ta, tb, m, n, k, a,
// lda, b, ldb, beta, c, ldc) computes C = op(A) op(B) + beta C with T = decltype(tag).
template <typename Body>
void with_gemm(const Tensor& x, Body&& body) {
  detail::dispatch(
      x,
      [&](auto tag) {
        using T = decltype(tag);
        body(tag, [](bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b,
                     int64_t ldb, T beta, T* c, int64_t ldc) {
          kernels::cpu::gemm<T>(ta, tb, m, n, k, T(1), a, lda, b, ldb, beta, c, ldc);
        });
      },
      [&](auto stream) {
        body(float{}, [stream](bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                               const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
          kernels::cuda::gemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc, stream);
        });
      });
}

}  // namespace

Tensor linear_forward(const Tensor& x, const Tensor& weight) {
  check_input("linear_forward", x, weight);
  const int64_t n = x.dim(0), in = x.dim(1), out = weight.dim(0);
  Tensor y = Tensor::empty({n, out}, x.dtype(), x.device());
  with_gemm(x, [&](auto tag, auto gemm) {
    using T = decltype(tag);
    gemm(false, true, n, out, in, x.data<T>(), in, weight.data<T>(), in, T(0), y.data<T>(), out);
  });
  return y;
}

void linear_backward(const Tensor& x, const Tensor& weight, const Tensor& dy, const Tensor& dx,
                     const Tensor& dweight) {
  constexpr const char* kOp = "linear_backward";
  check_input(kOp, x, weight);
  const int64_t n = x.dim(0), in = x.dim(1), out = weight.dim(0);
  detail::expect_args(kOp, x, {{"dy", dy, {n, out}}, {"dweight", dweight, weight.shape()}});
  if (dx.defined()) detail::expect_args(kOp, x, {{"dx", dx, x.shape()}});
  with_gemm(x, [&](auto tag, auto gemm) {
    using T = decltype(tag);
    if (dx.defined()) gemm(false, false, n, in, out, dy.data<T>(), out, weight.data<T>(), in, T(1), dx.data<T>(), in);
    gemm(true, false, out, in, n, dy.data<T>(), out, x.data<T>(), in, T(1), dweight.data<T>(), in);
  });
}

}  // namespace hdp::ops
