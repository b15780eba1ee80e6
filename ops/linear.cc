#include "ops/linear.h"

#include "kernels/cpu/blas.h"
#include "kernels/cuda/blas.h"
#include "ops/check.h"
#include "ops/add.h"
#include "ops/convert.h"
#include "ops/dispatch.h"

namespace hdp::ops {
namespace {

bool is_bf16(const Tensor& x) { return x.defined() && x.dtype() == DType::kBF16; }

// The dtype of y, dx and dW: f32 for bf16 operands, else the operands'.
DType out_dtype(const Tensor& x) { return is_bf16(x) ? DType::kF32 : x.dtype(); }

void check_input(const char* op, const Tensor& x, const Tensor& weight) {
  if (!is_bf16(x)) detail::expect_compute(op, "x", x);
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

// C (f32) = op(A) op(B) + beta C over whole bf16 tensors A and B (their row lengths lda, ldb).
void gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const Tensor& a, int64_t lda, const Tensor& b,
               int64_t ldb, float beta, const Tensor& c, int64_t ldc) {
  detail::dispatch_device(
      a,
      [&] {
        const Tensor af = to_dtype(a, DType::kF32), bf = to_dtype(b, DType::kF32);
        kernels::cpu::gemm<float>(ta, tb, m, n, k, 1.0f, af.data<float>(), lda, bf.data<float>(), ldb, beta,
                                  c.data<float>(), ldc);
      },
      [&](auto stream) {
        kernels::cuda::gemm_bf16(ta, tb, m, n, k, 1.0f, a.data<uint16_t>(), lda, b.data<uint16_t>(), ldb, beta,
                                 c.data<float>(), ldc, stream);
      });
}

// Shapes checked for a tensor of another dtype than x (an f32 output of bf16 operands).
void expect_out(const char* op, const char* name, const Tensor& t, const Tensor& x, const Shape& shape) {
  detail::expect(t.defined() && t.dtype() == out_dtype(x) && t.device() == x.device(), op,
                 std::string(name) + " is " + t.describe() + ", expected " + dtype_name(out_dtype(x)) + " on " +
                     device_name(x.device()));
  detail::expect_shape(op, name, t, shape);
}

}  // namespace

Tensor linear_forward(const Tensor& x, const Tensor& weight) {
  check_input("linear_forward", x, weight);
  const int64_t n = x.dim(0), in = x.dim(1), out = weight.dim(0);
  Tensor y = Tensor::empty({n, out}, out_dtype(x), x.device());
  if (is_bf16(x)) {
    gemm_bf16(false, true, n, out, in, x, in, weight, in, 0.0f, y, out);
    return y;
  }
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
  detail::expect_args(kOp, x, {{"dy", dy, {n, out}}});
  expect_out(kOp, "dweight", dweight, x, weight.shape());
  if (dx.defined()) expect_out(kOp, "dx", dx, x, x.shape());
  if (is_bf16(x)) {
    if (dx.defined()) gemm_bf16(false, false, n, in, out, dy, out, weight, in, 1.0f, dx, in);
    gemm_bf16(true, false, out, in, n, dy, out, x, in, 1.0f, dweight, in);
    return;
  }
  with_gemm(x, [&](auto tag, auto gemm) {
    using T = decltype(tag);
    if (dx.defined()) gemm(false, false, n, in, out, dy.data<T>(), out, weight.data<T>(), in, T(1), dx.data<T>(), in);
    gemm(true, false, out, in, n, dy.data<T>(), out, x.data<T>(), in, T(1), dweight.data<T>(), in);
  });
}

namespace {

// A column of n ones in bias's dtype on its device.
Tensor ones_column(int64_t n, const Tensor& bias) {
  const Shape shape{n, 1};
  if (bias.dtype() == DType::kF64) return Tensor::from_vector(std::vector<double>(static_cast<size_t>(n), 1.0), shape).to(bias.device());
  const Tensor ones = Tensor::from_vector(std::vector<float>(static_cast<size_t>(n), 1.0f), shape).to(bias.device());
  return bias.dtype() == DType::kF32 ? ones : to_dtype(ones, bias.dtype());
}

}  // namespace

void linear_bias_forward_(const Tensor& y, const Tensor& bias) {
  detail::expect_rank("linear_bias_forward_", "y", y, 2);
  detail::expect_rank("linear_bias_forward_", "bias", bias, 1);
  add_(y, linear_forward(ones_column(y.dim(0), bias), bias.reshape({bias.dim(0), 1})));
}

Tensor linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  Tensor y = linear_forward(x, weight);
  if (bias.defined()) linear_bias_forward_(y, bias);
  return y;
}

void linear_bias_backward(const Tensor& bias, const Tensor& dy, const Tensor& dbias) {
  detail::expect_rank("linear_bias_backward", "dy", dy, 2);
  detail::expect_rank("linear_bias_backward", "bias", bias, 1);
  const Shape column{bias.dim(0), 1};
  linear_backward(ones_column(dy.dim(0), bias), bias.reshape(column), dy, Tensor(), dbias.reshape(column));
}

}  // namespace hdp::ops
