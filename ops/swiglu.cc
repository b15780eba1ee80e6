#include "ops/swiglu.h"

#include "kernels/cpu/swiglu.h"
#include "kernels/cuda/pointwise.h"
#include "ops/check.h"
#include "ops/dispatch.h"

namespace hdp::ops {

Tensor swiglu_forward(const Tensor& gate, const Tensor& up) {
  constexpr const char* kOp = "swiglu_forward";
  detail::expect_compute(kOp, "gate", gate);
  detail::expect_args(kOp, gate, {{"up", up, gate.shape()}});
  Tensor h = Tensor::empty(gate.shape(), gate.dtype(), gate.device());
  detail::dispatch(
      gate,
      [&](auto tag) {
        using T = decltype(tag);
        kernels::cpu::swiglu_forward<T>(gate.data<T>(), up.data<T>(), h.data<T>(), gate.numel());
      },
      [&](auto stream) {
        kernels::cuda::swiglu_forward(gate.data<float>(), up.data<float>(), h.data<float>(), gate.numel(), stream);
      });
  return h;
}

void swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& dh, const Tensor& dgate, const Tensor& dup) {
  constexpr const char* kOp = "swiglu_backward";
  detail::expect_compute(kOp, "gate", gate);
  detail::expect_args(kOp, gate,
                      {{"up", up, gate.shape()}, {"dh", dh, gate.shape()}, {"dgate", dgate, gate.shape()},
                       {"dup", dup, gate.shape()}});
  detail::dispatch(
      gate,
      [&](auto tag) {
        using T = decltype(tag);
        kernels::cpu::swiglu_backward<T>(gate.data<T>(), up.data<T>(), dh.data<T>(), dgate.data<T>(), dup.data<T>(),
                                         gate.numel());
      },
      [&](auto stream) {
        kernels::cuda::swiglu_backward(gate.data<float>(), up.data<float>(), dh.data<float>(), dgate.data<float>(),
                                       dup.data<float>(), gate.numel(), stream);
      });
}

}  // namespace hdp::ops
