// The ops of bf16 mixed precision on the CPU: the conversion (round to nearest, ties to even, NaN
// kept, back to f32 exactly), a linear layer and attention over bf16 operands (equal, bit for bit,
// to the f32 op over the same values widened: on the CPU the bf16 path widens and runs the f32
// kernels, so any difference would be a wrong operand or a wrong output dtype), the model's bf16
// forward (close to f32: the operands carry bf16's rounding, at most 2^-8 relative), and bad arguments.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>

#include "common/error.h"
#include "kernels/cpu/bf16.h"
#include "ops/attention.h"
#include "ops/convert.h"
#include "ops/linear.h"
#include "ops/model/llama_model.h"
#include "tests/ops/tiny_llama.h"

namespace hdp::ops {
namespace {

Tensor random_f32(const Shape& shape, std::uint32_t seed, float scale = 1.0f) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

TEST(Bf16Convert, RoundsToNearestEvenKeepsNanAndWidensExactly) {
  const float tie_down = 1.0f + std::ldexp(1.0f, -8);            // halfway between 1 and 1 + 2^-7: to 1 (even)
  const float tie_up = 1.0f + 3 * std::ldexp(1.0f, -8);          // halfway, to 1 + 2^-6 (even)
  const float above = 1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20);  // just above half: up
  const std::vector<float> in{0.0f, -0.0f, 1.0f, tie_down, tie_up, above, -tie_down, std::numeric_limits<float>::max(),
                              std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                              1e-40f};
  const Tensor b = to_dtype(Tensor::from_vector(in, {static_cast<int64_t>(in.size())}), DType::kBF16);
  EXPECT_EQ(b.dtype(), DType::kBF16);
  const std::vector<float> out = to_dtype(b, DType::kF32).to_vector<float>();
  EXPECT_EQ(out[2], 1.0f);
  EXPECT_EQ(out[3], 1.0f);
  EXPECT_EQ(out[4], 1.0f + std::ldexp(1.0f, -6));
  EXPECT_EQ(out[5], 1.0f + std::ldexp(1.0f, -7));
  EXPECT_EQ(out[6], -1.0f);
  EXPECT_TRUE(std::isinf(out[7])) << "f32's largest value rounds past bf16's largest finite one";
  EXPECT_TRUE(std::isinf(out[8]));
  EXPECT_TRUE(std::isnan(out[9]));
  EXPECT_TRUE(std::signbit(out[1]));
  for (size_t i = 0; i < in.size(); ++i) {
    if (std::isnan(in[i])) continue;
    // A bf16 value widens exactly: converting it again changes nothing.
    EXPECT_EQ(kernels::cpu::f32_to_bf16(out[i]), b.data<uint16_t>()[i]) << i;
  }
  // Within half a unit in the last place: 2^-8 relative (8 significant bits) for normal values.
  const Tensor x = random_f32({1000}, 3);
  const std::vector<float> back = to_dtype(to_dtype(x, DType::kBF16), DType::kF32).to_vector<float>();
  for (int64_t i = 0; i < x.numel(); ++i)
    EXPECT_LE(std::abs(back[i] - x.data<float>()[i]), std::ldexp(std::abs(x.data<float>()[i]), -8)) << i;
}

TEST(Bf16Linear, EqualsTheF32LayerOverTheWidenedOperandsBitwise) {
  const Tensor x = to_dtype(random_f32({37, 24}, 1), DType::kBF16), w = to_dtype(random_f32({40, 24}, 2), DType::kBF16);
  const Tensor xf = to_dtype(x, DType::kF32), wf = to_dtype(w, DType::kF32);
  const Tensor y = linear_forward(x, w), yf = linear_forward(xf, wf);
  ASSERT_EQ(y.dtype(), DType::kF32);
  EXPECT_EQ(y.to_vector<float>(), yf.to_vector<float>());
  const Tensor dy = to_dtype(random_f32({37, 40}, 3), DType::kBF16);
  Tensor dx = Tensor::zeros({37, 24}, DType::kF32), dw = Tensor::zeros({40, 24}, DType::kF32);
  Tensor dxf = Tensor::zeros({37, 24}, DType::kF32), dwf = Tensor::zeros({40, 24}, DType::kF32);
  linear_backward(x, w, dy, dx, dw);
  linear_backward(xf, wf, to_dtype(dy, DType::kF32), dxf, dwf);
  EXPECT_EQ(dx.to_vector<float>(), dxf.to_vector<float>());
  EXPECT_EQ(dw.to_vector<float>(), dwf.to_vector<float>());
}

TEST(Bf16Attention, EqualsF32AttentionOverTheWidenedOperandsBitwise) {
  const std::vector<int32_t> cu{0, 30, 47};
  const AttentionSpec spec = AttentionSpec::packed(cu);
  const Tensor q = to_dtype(random_f32({47, 4, 16}, 4), DType::kBF16), k = to_dtype(random_f32({47, 2, 16}, 5), DType::kBF16),
               v = to_dtype(random_f32({47, 2, 16}, 6), DType::kBF16);
  const AttentionOutput o = attention_forward(q, k, v, spec);
  const AttentionOutput of = attention_forward(to_dtype(q, DType::kF32), to_dtype(k, DType::kF32), to_dtype(v, DType::kF32), spec);
  ASSERT_EQ(o.out.dtype(), DType::kF32);
  ASSERT_EQ(attention_result_dtype(DType::kBF16), DType::kF32);
  EXPECT_EQ(o.out.to_vector<float>(), of.out.to_vector<float>());
  EXPECT_EQ(o.lse.to_vector<float>(), of.lse.to_vector<float>());
  const Tensor dout = to_dtype(random_f32({47, 4, 16}, 7), DType::kBF16);
  Tensor dq = Tensor::zeros({47, 4, 16}, DType::kF32), dk = Tensor::zeros({47, 2, 16}, DType::kF32),
         dv = Tensor::zeros({47, 2, 16}, DType::kF32);
  Tensor dqf = dq.clone(), dkf = dk.clone(), dvf = dv.clone();
  attention_backward(q, k, v, spec, o, dout, Tensor(), dq, dk, dv);
  attention_backward(to_dtype(q, DType::kF32), to_dtype(k, DType::kF32), to_dtype(v, DType::kF32), spec, of,
                     to_dtype(dout, DType::kF32), Tensor(), dqf, dkf, dvf);
  EXPECT_EQ(dq.to_vector<float>(), dqf.to_vector<float>());
  EXPECT_EQ(dk.to_vector<float>(), dkf.to_vector<float>());
  EXPECT_EQ(dv.to_vector<float>(), dvf.to_vector<float>());
}

// Also for the families' features: llama3 RoPE scaling, tied embeddings and a free head_dim;
// Qwen2's q/k/v biases (set to values of the projections' order: they start at 0), tied.
void expect_bf16_close_to_f32(const model::LlamaConfig& config) {
  model::LlamaModel full(config), mixed(config, DType::kF32, Device::kCpu, model::Precision::kBF16);
  full.init(9);
  mixed.init(9);
  for (const model::ParamEntry& e : model::param_layout(config)) {
    if (!e.name.ends_with(".bias")) continue;
    for (int64_t i = 0; i < e.shape[0]; ++i) {
      const float b = 0.05f * std::sin(float(i + 1));
      full.params().data<float>()[e.offset + i] = mixed.params().data<float>()[e.offset + i] = b;
    }
  }
  ASSERT_EQ(mixed.params().dtype(), DType::kF32);
  ASSERT_EQ(mixed.grads().dtype(), DType::kF32);
  std::vector<std::vector<int32_t>> docs{{}, {}};
  for (int i = 0; i < 60; ++i) docs[0].push_back((i * 7 + 3) % 256);
  for (int i = 0; i < 25; ++i) docs[1].push_back((i * 13 + 1) % 256);
  const model::Batch batch = model::pack_documents(docs);
  const double lf = full.forward(batch), lm = mixed.forward(batch);
  full.backward(1.0 / 83);
  mixed.backward(1.0 / 83);
  // bf16 operands carry up to 2^-8 (0.4%) relative rounding, independent from entry to entry; the
  // loss, a sum over 83 tokens of sums over many products, moves far less (measured 7e-6).
  EXPECT_NEAR(lm / lf, 1.0, 1e-3) << lf << " vs " << lm;
  EXPECT_NE(lm, lf) << "the bf16 path must actually round";
  const std::vector<float> gf = full.grads().to_vector<float>(), gm = mixed.grads().to_vector<float>();
  double diff = 0, norm = 0;
  for (size_t i = 0; i < gf.size(); ++i) {
    diff += (double(gm[i]) - gf[i]) * (double(gm[i]) - gf[i]);
    norm += double(gf[i]) * gf[i];
  }
  // Each gradient entry sums products of bf16-rounded operands: a few times 2^-8 of relative
  // noise, measured 0.3% in L2; the bound is 3%.
  std::printf("bf16 vs f32: loss %.6f vs %.6f, gradient L2 distance %.4f\n", lm, lf, std::sqrt(diff / norm));
  EXPECT_LT(std::sqrt(diff / norm), 0.03);
  // The master weights were not touched by the forward's rounding.
  EXPECT_EQ(mixed.params().to_vector<float>(), full.params().to_vector<float>());
}

TEST(Bf16Model, ForwardAndGradientsAreCloseToF32AndTheMasterWeightsStayF32) {
  expect_bf16_close_to_f32(testing::tiny_llama());
  expect_bf16_close_to_f32(testing::tiny_llama3());
  expect_bf16_close_to_f32(testing::tiny_qwen2());
}

TEST(Bf16Errors, MixedOperandsOtherDtypesAndF64MixedPrecisionAreRefused) {
  const Tensor xb = Tensor::zeros({2, 4}, DType::kBF16), wf = Tensor::zeros({3, 4}, DType::kF32);
  EXPECT_THROW(linear_forward(xb, wf), InvalidArgument);
  EXPECT_THROW(convert_into(Tensor::zeros({4}, DType::kI32), Tensor::zeros({4}, DType::kBF16)), InvalidArgument);
  EXPECT_THROW(convert_into(Tensor::zeros({4}, DType::kF32), Tensor::zeros({5}, DType::kBF16)), InvalidArgument);
  EXPECT_THROW(model::LlamaModel(testing::tiny_llama(), DType::kF64, Device::kCpu, model::Precision::kBF16),
               InvalidArgument);
  EXPECT_THROW(model::parse_precision("fp16"), InvalidArgument);
  const Tensor dy = Tensor::zeros({2, 3}, DType::kBF16), w = Tensor::zeros({3, 4}, DType::kBF16);
  // The gradients of bf16 operands are f32: a bf16 dweight is refused.
  EXPECT_THROW(linear_backward(xb, w, dy, Tensor(), Tensor::zeros({3, 4}, DType::kBF16)), InvalidArgument);
}

}  // namespace
}  // namespace hdp::ops
