#include "ops/cross_entropy.h"

#include "kernels/cpu/cross_entropy.h"
#include "kernels/cuda/loss_optim.h"
#include "ops/check.h"
#include "ops/dispatch.h"

namespace hdp::ops {
namespace {

void check_input(const char* op, const Tensor& logits, const Tensor& targets) {
  detail::expect_compute(op, "logits", logits);
  detail::expect_rank(op, "logits", logits, 2);
  detail::expect_dtype(op, "targets", targets, DType::kI32);
  detail::expect_device(op, "targets", targets, logits.device());
  detail::expect_shape(op, "targets", targets, {logits.dim(0)});
  const int64_t vocab = logits.dim(1);
  for (int32_t t : targets.to_vector<int32_t>())
    detail::expect(t >= -1 && t < vocab, op,
                   "target " + std::to_string(t) + " out of range for logits " + logits.describe());
}

}  // namespace

CrossEntropyOutput cross_entropy_forward(const Tensor& logits, const Tensor& targets) {
  check_input("cross_entropy_forward", logits, targets);
  const int64_t n = logits.dim(0), vocab = logits.dim(1);
  CrossEntropyOutput r{0, Tensor::empty({n}, logits.dtype(), logits.device())};
  detail::dispatch(
      logits,
      [&](auto tag) {
        using T = decltype(tag);
        r.loss_sum = kernels::cpu::cross_entropy_forward<T>(logits.data<T>(), targets.data<int32_t>(), r.lse.data<T>(),
                                                            n, vocab);
      },
      [&](auto stream) {
        r.loss_sum = kernels::cuda::cross_entropy_forward(logits.data<float>(), targets.data<int32_t>(), r.lse.data<float>(),
                                                          n, vocab, stream);
      });
  return r;
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, double dloss,
                            const Tensor& dlogits) {
  constexpr const char* kOp = "cross_entropy_backward";
  check_input(kOp, logits, targets);
  const int64_t n = logits.dim(0), vocab = logits.dim(1);
  detail::expect_args(kOp, logits, {{"lse", lse, {n}}, {"dlogits", dlogits, logits.shape()}});
  detail::dispatch(
      logits,
      [&](auto tag) {
        using T = decltype(tag);
        kernels::cpu::cross_entropy_backward<T>(logits.data<T>(), targets.data<int32_t>(), lse.data<T>(), T(dloss),
                                                dlogits.data<T>(), n, vocab);
      },
      [&](auto stream) {
        kernels::cuda::cross_entropy_backward(logits.data<float>(), targets.data<int32_t>(), lse.data<float>(),
                                              static_cast<float>(dloss), dlogits.data<float>(), n, vocab, stream);
      });
}

}  // namespace hdp::ops
