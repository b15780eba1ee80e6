#include "ops/rope.h"

#include "kernels/cpu/rope.h"
#include "kernels/cuda/pointwise.h"
#include "ops/check.h"
#include "ops/dispatch.h"

namespace hdp::ops {
namespace {

void check_input(const char* op, const Tensor& x, const Tensor& positions) {
  detail::expect_compute(op, "x", x);
  detail::expect_rank(op, "x", x, 3);
  detail::expect(x.dim(2) % 2 == 0, op, "x " + x.describe() + " has an odd head_dim");
  detail::expect_dtype(op, "positions", positions, DType::kI64);
  detail::expect_device(op, "positions", positions, x.device());
  detail::expect_shape(op, "positions", positions, {x.dim(0)});
}

}  // namespace

Tensor rope_forward(const Tensor& x, const Tensor& positions, double theta) {
  check_input("rope_forward", x, positions);
  const int64_t n = x.dim(0);
  const int heads = static_cast<int>(x.dim(1)), hd = static_cast<int>(x.dim(2));
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  detail::dispatch(
      x,
      [&](auto tag) {
        using T = decltype(tag);
        kernels::cpu::rope_forward<T>(x.data<T>(), positions.data<int64_t>(), y.data<T>(), n, heads, hd, theta);
      },
      [&](auto stream) {
        kernels::cuda::rope_forward(x.data<float>(), positions.data<int64_t>(), y.data<float>(), n, heads, hd, theta, stream);
      });
  return y;
}

void rope_backward(const Tensor& dy, const Tensor& positions, double theta, const Tensor& dx) {
  constexpr const char* kOp = "rope_backward";
  check_input(kOp, dy, positions);
  detail::expect_args(kOp, dy, {{"dx", dx, dy.shape()}});
  const int64_t n = dy.dim(0);
  const int heads = static_cast<int>(dy.dim(1)), hd = static_cast<int>(dy.dim(2));
  detail::dispatch(
      dy,
      [&](auto tag) {
        using T = decltype(tag);
        kernels::cpu::rope_backward<T>(dy.data<T>(), positions.data<int64_t>(), dx.data<T>(), n, heads, hd, theta);
      },
      [&](auto stream) {
        kernels::cuda::rope_backward(dy.data<float>(), positions.data<int64_t>(), dx.data<float>(), n, heads, hd, theta, stream);
      });
}

}  // namespace hdp::ops
