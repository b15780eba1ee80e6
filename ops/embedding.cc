#include "ops/embedding.h"

#include "kernels/cpu/embedding.h"
#include "kernels/cuda/pointwise.h"
#include "ops/check.h"
#include "ops/dispatch.h"

namespace hdp::ops {
namespace {

void check_tokens(const char* op, const Tensor& tokens, const Tensor& weight) {
  detail::expect_compute(op, "weight", weight);
  detail::expect_rank(op, "weight", weight, 2);
  detail::expect_rank(op, "tokens", tokens, 1);
  detail::expect_dtype(op, "tokens", tokens, DType::kI32);
  detail::expect_device(op, "tokens", tokens, weight.device());
  const int64_t vocab = weight.dim(0);
  for (int32_t t : tokens.to_vector<int32_t>())
    detail::expect(t >= 0 && t < vocab, op,
                   "token id " + std::to_string(t) + " out of range for weight " + weight.describe());
}

}  // namespace

Tensor embedding_forward(const Tensor& tokens, const Tensor& weight) {
  check_tokens("embedding_forward", tokens, weight);
  const int64_t n = tokens.dim(0), dim = weight.dim(1);
  Tensor out = Tensor::empty({n, dim}, weight.dtype(), weight.device());
  detail::dispatch(
      weight,
      [&](auto tag) {
        using T = decltype(tag);
        kernels::cpu::embedding_forward<T>(tokens.data<int32_t>(), weight.data<T>(), out.data<T>(), n, dim);
      },
      [&](auto stream) {
        kernels::cuda::embedding_forward(tokens.data<int32_t>(), weight.data<float>(), out.data<float>(), n, dim, stream);
      });
  return out;
}

void embedding_backward(const Tensor& tokens, const Tensor& dout, const Tensor& dweight) {
  constexpr const char* kOp = "embedding_backward";
  check_tokens(kOp, tokens, dweight);
  const int64_t n = tokens.dim(0), dim = dweight.dim(1);
  detail::expect_like(kOp, "dout", dout, dweight);
  detail::expect_shape(kOp, "dout", dout, {n, dim});
  detail::dispatch(
      dweight,
      [&](auto tag) {
        using T = decltype(tag);
        kernels::cpu::embedding_backward<T>(tokens.data<int32_t>(), dout.data<T>(), dweight.data<T>(), n, dim);
      },
      [&](auto stream) {
        kernels::cuda::embedding_backward(tokens.data<int32_t>(), dout.data<float>(), dweight.data<float>(), n, dim, stream);
      });
}

}  // namespace hdp::ops
