#include "ops/rope.h"

#include <cmath>

#include "kernels/cpu/rope.h"
#include "kernels/cuda/pointwise.h"
#include "ops/check.h"
#include "ops/dispatch.h"

namespace hdp::ops {
namespace {

void check_input(const char* op, const Tensor& x, const Tensor& positions, const Tensor& inv_freq) {
  detail::expect_compute(op, "x", x);
  detail::expect_rank(op, "x", x, 3);
  detail::expect(x.dim(2) % 2 == 0, op, "x " + x.describe() + " has an odd head_dim");
  detail::expect_dtype(op, "positions", positions, DType::kI64);
  detail::expect_device(op, "positions", positions, x.device());
  detail::expect_shape(op, "positions", positions, {x.dim(0)});
  detail::expect_dtype(op, "inv_freq", inv_freq, x.dtype());
  detail::expect_device(op, "inv_freq", inv_freq, x.device());
  detail::expect_shape(op, "inv_freq", inv_freq, {x.dim(2) / 2});
}

}  // namespace

std::vector<double> rope_default_inv_freq(double theta, int head_dim) {
  std::vector<double> inv(static_cast<size_t>(head_dim / 2));
  for (int i = 0; i < head_dim / 2; ++i) inv[static_cast<size_t>(i)] = 1.0 / std::pow(theta, double(2 * i) / double(head_dim));
  return inv;
}

Tensor rope_table(const std::vector<double>& inv_freq, DType dtype, Device device) {
  const Shape shape{static_cast<int64_t>(inv_freq.size())};
  if (dtype == DType::kF64) return Tensor::from_vector(inv_freq, shape).to(device);
  return Tensor::from_vector(std::vector<float>(inv_freq.begin(), inv_freq.end()), shape).to(device);
}

Tensor rope_forward(const Tensor& x, const Tensor& positions, const Tensor& inv_freq) {
  check_input("rope_forward", x, positions, inv_freq);
  const int64_t n = x.dim(0);
  const int heads = static_cast<int>(x.dim(1)), hd = static_cast<int>(x.dim(2));
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  detail::dispatch(
      x,
      [&](auto tag) {
        using T = decltype(tag);
        kernels::cpu::rope_forward<T>(x.data<T>(), positions.data<int64_t>(), y.data<T>(), n, heads, hd, inv_freq.data<T>());
      },
      [&](auto stream) {
        kernels::cuda::rope_forward(x.data<float>(), positions.data<int64_t>(), y.data<float>(), n, heads, hd, inv_freq.data<float>(), stream);
      });
  return y;
}

void rope_backward(const Tensor& dy, const Tensor& positions, const Tensor& inv_freq, const Tensor& dx) {
  constexpr const char* kOp = "rope_backward";
  check_input(kOp, dy, positions, inv_freq);
  detail::expect_args(kOp, dy, {{"dx", dx, dy.shape()}});
  const int64_t n = dy.dim(0);
  const int heads = static_cast<int>(dy.dim(1)), hd = static_cast<int>(dy.dim(2));
  detail::dispatch(
      dy,
      [&](auto tag) {
        using T = decltype(tag);
        kernels::cpu::rope_backward<T>(dy.data<T>(), positions.data<int64_t>(), dx.data<T>(), n, heads, hd, inv_freq.data<T>());
      },
      [&](auto stream) {
        kernels::cuda::rope_backward(dy.data<float>(), positions.data<int64_t>(), dx.data<float>(), n, heads, hd, inv_freq.data<float>(), stream);
      });
}

}  // namespace hdp::ops
