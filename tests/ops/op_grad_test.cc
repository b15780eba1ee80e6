// Every op's backward against float64 central differences, and the f32 path against the f64 one.
// Sizes are tiny (a finite-difference check costs two forwards per input element).
#include <gtest/gtest.h>

#include <cmath>

#include "ops/add.h"
#include "ops/cross_entropy.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "ops/model/llama_config.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "ops/swiglu.h"
#include "tests/ops/grad_check.h"

namespace hdp::ops::testing {
namespace {

Tensor zeros_like(const Tensor& t) { return Tensor::zeros(t.shape(), t.dtype()); }

TEST(OpGrad, Embedding) {
  const Tensor tokens = Tensor::from_vector<int32_t>({3, 0, 3, 5, 1}, {5});  // a repeated id accumulates
  auto fwd = [&](const Tensors& in) { return Tensors{embedding_forward(tokens, in[0])}; };
  auto bwd = [&](const Tensors& in, const Tensors&, const Tensors& d) {
    Tensor dw = zeros_like(in[0]);
    embedding_backward(tokens, d[0], dw);
    return Tensors{dw};
  };
  expect_grad_check_passes(grad_check(fwd, bwd, {random_tensor({6, 4}, DType::kF64, 1)}, 2));
}

TEST(OpGrad, RmsNorm) {
  auto fwd = [](const Tensors& in) { return Tensors{rmsnorm_forward(in[0], in[1], 1e-5).y}; };
  auto bwd = [](const Tensors& in, const Tensors&, const Tensors& d) {
    Tensor dx = zeros_like(in[0]), dw = zeros_like(in[1]);
    rmsnorm_backward(in[0], in[1], rmsnorm_forward(in[0], in[1], 1e-5).rstd, d[0], dx, dw);
    return Tensors{dx, dw};
  };
  expect_grad_check_passes(
      grad_check(fwd, bwd, {random_tensor({5, 8}, DType::kF64, 3), random_tensor({8}, DType::kF64, 4, 0.5, 1.5)}, 5));
}

TEST(OpGrad, Linear) {
  auto fwd = [](const Tensors& in) { return Tensors{linear_forward(in[0], in[1])}; };
  auto bwd = [](const Tensors& in, const Tensors&, const Tensors& d) {
    Tensor dx = zeros_like(in[0]), dw = zeros_like(in[1]);
    linear_backward(in[0], in[1], d[0], dx, dw);
    return Tensors{dx, dw};
  };
  expect_grad_check_passes(
      grad_check(fwd, bwd, {random_tensor({4, 6}, DType::kF64, 6), random_tensor({3, 6}, DType::kF64, 7)}, 8));
}

// RoPE with global positions and the inverse frequencies of each rope_type hdp reads: plain, linear
// and Llama 3's frequency bands (head_dim 16 with original_max_position_embeddings 64 puts
// frequencies in all three bands: wavelengths 2*pi*10000^(i/8) run from 6.3 to 20,000).
TEST(OpGrad, RopeWithGlobalPositions) {
  const Tensor pos = Tensor::from_vector<int64_t>({0, 1, 7, 4096, 65537}, {5});  // a shard far into a sequence
  model::LlamaConfig c;
  c.d_model = 64;
  c.explicit_head_dim = 16;
  for (model::RopeType type : {model::RopeType::kDefault, model::RopeType::kLinear, model::RopeType::kLlama3}) {
    SCOPED_TRACE(model::rope_type_name(type));
    c.rope_scaling = {.type = type, .factor = 8.0, .low_freq_factor = 1.0, .high_freq_factor = 4.0,
                      .original_max_positions = 64};
    const std::vector<double> inv_freq = c.rope_inv_freq();  // grad_check runs f64 and f32
    auto fwd = [&](const Tensors& in) { return Tensors{rope_forward(in[0], pos, rope_table(inv_freq, in[0].dtype()))}; };
    auto bwd = [&](const Tensors& in, const Tensors&, const Tensors& d) {
      Tensor dx = zeros_like(in[0]);
      rope_backward(d[0], pos, rope_table(inv_freq, d[0].dtype()), dx);
      return Tensors{dx};
    };
    expect_grad_check_passes(grad_check(fwd, bwd, {random_tensor({5, 2, 16}, DType::kF64, 9)}, 10));
  }
}

// A bias on every row (Qwen2's q/k/v): its gradient is the column sum of dy.
TEST(OpGrad, LinearWithBias) {
  auto fwd = [](const Tensors& in) { return Tensors{linear_forward(in[0], in[1], in[2])}; };
  auto bwd = [](const Tensors& in, const Tensors&, const Tensors& d) {
    Tensor dx = zeros_like(in[0]), dw = zeros_like(in[1]), db = zeros_like(in[2]);
    linear_backward(in[0], in[1], d[0], dx, dw);
    linear_bias_backward(in[2], d[0], db);
    return Tensors{dx, dw, db};
  };
  expect_grad_check_passes(grad_check(fwd, bwd,
                                      {random_tensor({4, 6}, DType::kF64, 21), random_tensor({3, 6}, DType::kF64, 22),
                                       random_tensor({3}, DType::kF64, 23)},
                                      24));
}

TEST(OpGrad, SwiGlu) {
  auto fwd = [](const Tensors& in) { return Tensors{swiglu_forward(in[0], in[1])}; };
  auto bwd = [](const Tensors& in, const Tensors&, const Tensors& d) {
    Tensor dg = zeros_like(in[0]), du = zeros_like(in[1]);
    swiglu_backward(in[0], in[1], d[0], dg, du);
    return Tensors{dg, du};
  };
  expect_grad_check_passes(grad_check(
      fwd, bwd, {random_tensor({3, 7}, DType::kF64, 11, -4, 4), random_tensor({3, 7}, DType::kF64, 12)}, 13));
}

TEST(OpGrad, CrossEntropySumsCountedTokens) {
  const Tensor targets = Tensor::from_vector<int32_t>({2, -1, 0, 9, 4}, {5});
  auto fwd = [&](const Tensors& in) {
    Tensor loss = Tensor::empty({1}, in[0].dtype());
    const double sum = cross_entropy_forward(in[0], targets).loss_sum;
    if (loss.dtype() == DType::kF64)
      loss.data<double>()[0] = sum;
    else
      loss.data<float>()[0] = static_cast<float>(sum);
    return Tensors{loss};
  };
  auto bwd = [&](const Tensors& in, const Tensors&, const Tensors& d) {
    Tensor dl = zeros_like(in[0]);
    const double dloss = d[0].dtype() == DType::kF64 ? d[0].data<double>()[0] : d[0].data<float>()[0];
    cross_entropy_backward(in[0], targets, cross_entropy_forward(in[0], targets).lse, dloss, dl);
    return Tensors{dl};
  };
  expect_grad_check_passes(grad_check(fwd, bwd, {random_tensor({5, 10}, DType::kF64, 14, -3, 3)}, 15));
}

TEST(OpGrad, CrossEntropyValueMatchesDefinition) {
  // One row, logits (0, ln 3): p(target 1) = 3/4, so the loss is ln(4/3); the ignored row adds 0.
  const Tensor logits = Tensor::from_vector<double>({0.0, std::log(3.0), 5.0, 1.0}, {2, 2});
  const Tensor targets = Tensor::from_vector<int32_t>({1, -1}, {2});
  EXPECT_NEAR(cross_entropy_forward(logits, targets).loss_sum, std::log(4.0 / 3.0), 1e-15);
}

TEST(OpGrad, AddAccumulates) {
  const Tensor a = Tensor::from_vector<float>({1, 2, 3}, {3}), b = Tensor::from_vector<float>({10, 20, 30}, {3});
  add_(a, b);
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{11, 22, 33}));
}

}  // namespace
}  // namespace hdp::ops::testing
