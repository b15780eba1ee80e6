#include "ops/rmsnorm.h"

#include "kernels/cpu/rmsnorm.h"
#include "kernels/cuda/pointwise.h"
#include "ops/check.h"
#include "ops/dispatch.h"

namespace hdp::ops {
namespace {

void check_input(const char* op, const Tensor& x, const Tensor& weight) {
  detail::expect_compute(op, "x", x);
  detail::expect_rank(op, "x", x, 2);
  detail::expect_like(op, "weight", weight, x);
  detail::expect_shape(op, "weight", weight, {x.dim(1)});
}

}  // namespace

RmsNormOutput rmsnorm_forward(const Tensor& x, const Tensor& weight, double eps) {
  check_input("rmsnorm_forward", x, weight);
  const int64_t n = x.dim(0), dim = x.dim(1);
  RmsNormOutput r{Tensor::empty({n, dim}, x.dtype(), x.device()), Tensor::empty({n}, x.dtype(), x.device())};
  detail::dispatch(
      x,
      [&](auto tag) {
        using T = decltype(tag);
        kernels::cpu::rmsnorm_forward<T>(x.data<T>(), weight.data<T>(), r.y.data<T>(), r.rstd.data<T>(), n, dim, eps);
      },
      [&](auto stream) {
        kernels::cuda::rmsnorm_forward(x.data<float>(), weight.data<float>(), r.y.data<float>(), r.rstd.data<float>(), n,
                                       dim, eps, stream);
      });
  return r;
}

void rmsnorm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& dy, const Tensor& dx,
                      const Tensor& dweight) {
  constexpr const char* kOp = "rmsnorm_backward";
  check_input(kOp, x, weight);
  const int64_t n = x.dim(0), dim = x.dim(1);
  detail::expect_args(kOp, x, {{"rstd", rstd, {n}}, {"dy", dy, x.shape()}, {"dx", dx, x.shape()},
                               {"dweight", dweight, {dim}}});
  detail::dispatch(
      x,
      [&](auto tag) {
        using T = decltype(tag);
        kernels::cpu::rmsnorm_backward<T>(x.data<T>(), weight.data<T>(), rstd.data<T>(), dy.data<T>(), dx.data<T>(),
                                          dweight.data<T>(), n, dim);
      },
      [&](auto stream) {
        kernels::cuda::rmsnorm_backward(x.data<float>(), weight.data<float>(), rstd.data<float>(), dy.data<float>(),
                                        dx.data<float>(), dweight.data<float>(), n, dim, stream);
      });
}

}  // namespace hdp::ops
