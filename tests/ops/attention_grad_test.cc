// Attention and the LSE merge against float64 central differences (outputs AND the LSE are
// differentiated: the loss projects both), and the f32 path against the f64 one.
#include <gtest/gtest.h>

#include "ops/attention.h"
#include "tests/ops/grad_check.h"

namespace hdp::ops::testing {
namespace {

Tensor zeros_like(const Tensor& t) { return Tensor::zeros(t.shape(), t.dtype()); }

// Checks attention(q, k, v) under `spec` with the given head counts.
void check_attention(const AttentionSpec& spec, int64_t tq, int64_t tk, int heads, int kv_heads, uint64_t seed) {
  constexpr int kHeadDim = 4;
  auto fwd = [&](const Tensors& in) {
    AttentionOutput o = attention_forward(in[0], in[1], in[2], spec);
    return Tensors{o.out, o.lse};
  };
  auto bwd = [&](const Tensors& in, const Tensors& out, const Tensors& d) {
    Tensor dq = zeros_like(in[0]), dk = zeros_like(in[1]), dv = zeros_like(in[2]);
    attention_backward(in[0], in[1], in[2], spec, {out[0], out[1]}, d[0], d[1], dq, dk, dv);
    return Tensors{dq, dk, dv};
  };
  const Tensors in{random_tensor({tq, heads, kHeadDim}, DType::kF64, seed),
                   random_tensor({tk, kv_heads, kHeadDim}, DType::kF64, seed + 1),
                   random_tensor({tk, kv_heads, kHeadDim}, DType::kF64, seed + 2)};
  expect_grad_check_passes(grad_check(fwd, bwd, in, seed + 3));
}

TEST(AttentionGrad, PackedCausalGqa) {
  // Three documents (5, 1, 4 tokens); GQA with 4 query heads on 2 kv heads.
  check_attention(AttentionSpec::packed({0, 5, 6, 10}), 10, 10, 4, 2, 20);
}

TEST(AttentionGrad, PackedCausalMultiQuery) { check_attention(AttentionSpec::packed({0, 3, 9}), 9, 9, 2, 1, 30); }

TEST(AttentionGrad, CausalBlockWithPositionOffsets) {
  // Queries at positions 6..10 against keys 4..10: partly visible, the diagonal inside the block.
  check_attention(AttentionSpec::block(5, 6, 7, 4, true), 5, 7, 2, 2, 40);
}

TEST(AttentionGrad, CausalBlockWithInvisibleRows) {
  // Queries 0..3 against keys 2..6: rows 0 and 1 see nothing (LSE -inf, output 0, no gradient).
  check_attention(AttentionSpec::block(4, 0, 5, 2, true), 4, 5, 2, 1, 50);
}

TEST(AttentionGrad, FullMaskBlock) { check_attention(AttentionSpec::block(3, 10, 6, 0, false), 3, 6, 2, 2, 60); }

TEST(AttentionGrad, MergeOfTwoPartials) {
  auto fwd = [](const Tensors& in) {
    AttentionOutput m = attention_merge_forward({in[0], in[1]}, {in[2], in[3]});
    return Tensors{m.out, m.lse};
  };
  auto bwd = [](const Tensors& in, const Tensors& out, const Tensors& d) {
    Tensors g{zeros_like(in[0]), zeros_like(in[1]), zeros_like(in[2]), zeros_like(in[3])};
    attention_merge_backward({in[0], in[1]}, {in[2], in[3]}, {out[0], out[1]}, d[0], d[1], {g[0], g[1]},
                             {g[2], g[3]});
    return g;
  };
  const Tensors in{random_tensor({3, 2, 4}, DType::kF64, 70), random_tensor({3, 2}, DType::kF64, 71, -2, 2),
                   random_tensor({3, 2, 4}, DType::kF64, 72), random_tensor({3, 2}, DType::kF64, 73, -2, 2)};
  expect_grad_check_passes(grad_check(fwd, bwd, in, 74));
}

}  // namespace
}  // namespace hdp::ops::testing
