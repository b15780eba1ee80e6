#include "ops/adamw.h"

#include "kernels/cuda/loss_optim.h"
#include "ops/check.h"
#include "ops/dispatch.h"

namespace hdp::ops {

void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, AdamWParams params,
                double grad_norm, double max_grad_norm) {
  constexpr const char* kOp = "adamw_step";
  detail::expect_compute(kOp, "param", param);
  detail::expect_args(kOp, param, {{"grad", grad, param.shape()}, {"m", m, param.shape()}, {"v", v, param.shape()}});
  detail::expect(params.step >= 1, kOp, "step must be >= 1, got " + std::to_string(params.step));
  params.grad_scale = kernels::clip_scale(grad_norm, max_grad_norm);
  detail::dispatch(
      param,
      [&](auto tag) {
        using T = decltype(tag);
        kernels::cpu::adamw_step<T>(param.data<T>(), grad.data<T>(), m.data<T>(), v.data<T>(), param.numel(), params);
      },
      [&](auto stream) {
        kernels::cuda::adamw_step(param.data<float>(), grad.data<float>(), m.data<float>(), v.data<float>(), param.numel(),
                                  params, stream);
      });
}

double sum_squares(const Tensor& x) {
  detail::expect_compute("sum_squares", "x", x);
  return detail::dispatch(
      x,
      [&](auto tag) {
        using T = decltype(tag);
        return kernels::cpu::sum_squares<T>(x.data<T>(), x.numel());
      },
      [&](auto stream) {
        return kernels::cuda::sum_squares(x.data<float>(), x.numel(), stream);
      });
}

}  // namespace hdp::ops
