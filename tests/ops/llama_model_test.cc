// The LLaMA model: HF parameter names in one flat buffer, deterministic init, whole-model gradient
// check in float64, packing invariance, and overfitting a short text.
#include <gtest/gtest.h>

#include <omp.h>

#include <cmath>
#include <cstdint>
#include <numbers>
#include <random>
#include <string>

#include "common/error.h"
#include "ops/adamw.h"
#include "ops/model/llama_model.h"
#include "tests/ops/grad_check.h"
#include "tests/ops/tiny_llama.h"

namespace hdp::ops::model {
namespace {

using testing::cast;
using testing::rel_error;

LlamaConfig tiny() { return testing::tiny_llama(); }

std::vector<int32_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

TEST(LlamaParams, HuggingFaceNamesShapesAndOneFlatBuffer) {
  const LlamaConfig c = tiny();
  const std::vector<ParamEntry> layout = param_layout(c);
  ASSERT_EQ(layout.size(), 1u + 9u * 2u + 2u);
  EXPECT_EQ(layout.front().name, "model.embed_tokens.weight");
  EXPECT_EQ(layout.front().shape, (Shape{256, 32}));
  EXPECT_EQ(layout[2].name, "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(layout[3].shape, (Shape{16, 32}));  // k_proj: n_kv_heads * head_dim = 2 * 8 rows
  EXPECT_EQ(layout[9].name, "model.layers.0.mlp.down_proj.weight");
  EXPECT_EQ(layout[9].shape, (Shape{32, 64}));
  EXPECT_EQ(layout.back().name, "lm_head.weight");
  int64_t next = 0;  // contiguous, no gaps
  for (const ParamEntry& e : layout) {
    EXPECT_EQ(e.offset, next) << e.name;
    next += e.shape.size() == 1 ? e.shape[0] : e.shape[0] * e.shape[1];
  }
  EXPECT_EQ(next, param_count(c));
  LlamaModel m(c);
  const Tensor v = named_view(c, m.params(), "model.layers.1.post_attention_layernorm.weight");
  EXPECT_EQ(v.data<float>(), m.weights().layers[1].post_norm.data<float>());
  EXPECT_THROW(named_view(c, m.params(), "model.layers.2.mlp.up_proj.weight"), InvalidArgument);
}

TEST(LlamaParams, InitIsDeterministicWithHfScale) {
  const LlamaConfig c = tiny();
  LlamaModel a(c), b(c), other(c);
  a.init(42);
  b.init(42);
  other.init(43);
  EXPECT_EQ(a.params().to_vector<float>(), b.params().to_vector<float>());
  EXPECT_NE(a.params().to_vector<float>(), other.params().to_vector<float>());
  for (float w : a.weights().norm.to_vector<float>()) EXPECT_EQ(w, 1.0f);
  // 8192 N(0, 0.02^2) draws: the sample std is within 3% of 0.02 with overwhelming probability.
  double ss = 0;
  for (float w : a.weights().embed.to_vector<float>()) ss += double(w) * w;
  EXPECT_NEAR(std::sqrt(ss / a.weights().embed.numel()), 0.02, 0.02 * 0.03);
}

// init_params draws each element's values from its index (a parallel loop); they must be the bits of
// drawing one splitmix64 stream in layout order, two draws an element of a matrix, as the header says
// and as every checkpoint and equivalence test made before assumed. The reference below is that
// sequential definition, written out; the check runs on one thread and on four, and on a model with
// biases (which draw nothing) between matrices.
TEST(LlamaParams, InitIsTheSequentialStreamOnAnyNumberOfThreads) {
  auto sequential = [](const LlamaConfig& c, std::uint64_t seed) {
    std::uint64_t state = seed;
    auto next = [&] {
      std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      return z ^ (z >> 31);
    };
    auto uniform = [&] { return (double(next() >> 11) + 0.5) * 0x1.0p-53; };
    std::vector<double> out;
    for (const ParamEntry& e : param_layout(c)) {
      const bool is_vector = e.shape.size() == 1, is_bias = e.name.ends_with(".bias");
      const int64_t n = is_vector ? e.shape[0] : e.shape[0] * e.shape[1];
      EXPECT_EQ(static_cast<int64_t>(out.size()), e.offset);
      for (int64_t i = 0; i < n; ++i) {
        double x = is_bias ? 0.0 : 1.0;
        if (!is_vector) {
          const double u1 = uniform(), u2 = uniform();
          x = 0.02 * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
        }
        out.push_back(x);
      }
    }
    return out;
  };
  const int threads_before = omp_get_max_threads();
  for (const LlamaConfig& c : {tiny(), testing::tiny_qwen2()}) {
    const std::vector<double> expected = sequential(c, 1234);
    const std::vector<float> expected_f32(expected.begin(), expected.end());
    for (int threads : {1, 4}) {
      omp_set_num_threads(threads);
      LlamaModel f32(c);
      f32.init(1234);
      EXPECT_EQ(f32.params().to_vector<float>(), expected_f32) << threads << " thread(s)";
      const Tensor f64 = Tensor::zeros({param_count(c)}, DType::kF64);
      init_params(c, f64, 1234);
      EXPECT_EQ(f64.to_vector<double>(), expected) << threads << " thread(s)";
    }
  }
  omp_set_num_threads(threads_before);
}

TEST(LlamaParams, RejectsInconsistentConfig) {
  LlamaConfig c = tiny();
  c.n_kv_heads = 3;
  EXPECT_THROW(LlamaModel{c}, InvalidArgument);
}

// Central differences of the summed loss on sampled coordinates of every named tensor.
void check_whole_model_gradient(const LlamaConfig& c) {
  const Batch batch = pack_documents({bytes_of("hello, wor"), bytes_of("ld!!?"), bytes_of("ab")});
  LlamaModel m64(c, DType::kF64);
  m64.init(7);
  // Larger-than-init weights make every path contribute visibly (at std 0.02 the attention is
  // nearly uniform and the gradient check would be insensitive to much of it); biases (0 at init)
  // get values of the same order as the projections' outputs.
  for (const ParamEntry& e : param_layout(c)) {
    double* p = m64.params().data<double>() + e.offset;
    if (e.name.ends_with(".bias")) {
      for (int64_t i = 0; i < e.shape[0]; ++i) p[i] = 0.5 * std::sin(double(i + 1));
    }
    if (e.shape.size() != 2) continue;  // norm weights stay 1
    for (int64_t i = 0; i < e.shape[0] * e.shape[1]; ++i) p[i] *= 10;
  }
  m64.zero_grad();
  m64.forward(batch);
  m64.backward(1.0);
  const std::vector<double> grad = m64.grads().to_vector<double>();

  std::mt19937 rng(3);
  std::vector<double> analytic, numeric;
  constexpr double kH = 1e-5;  // see tests/ops/grad_check.cc for why this step gives ~1e-9 error
  for (const ParamEntry& e : param_layout(c)) {
    const int64_t n = e.shape.size() == 1 ? e.shape[0] : e.shape[0] * e.shape[1];
    for (int s = 0; s < 6; ++s) {
      const int64_t i = e.offset + std::uniform_int_distribution<int64_t>(0, n - 1)(rng);
      double* p = m64.params().data<double>() + i;
      const double saved = *p;
      *p = saved + kH;
      const double up = m64.forward(batch);
      *p = saved - kH;
      const double down = m64.forward(batch);
      *p = saved;
      analytic.push_back(grad[static_cast<size_t>(i)]);
      numeric.push_back((up - down) / (2 * kH));
    }
  }
  const int64_t k = static_cast<int64_t>(analytic.size());
  EXPECT_LE(rel_error(Tensor::from_vector(analytic, {k}), Tensor::from_vector(numeric, {k})), 1e-6);

  // The f32 model on the same (rounded) weights: gradient within 1e-4 of the f64 one.
  LlamaModel m32(c, DType::kF32);
  m32.params().copy_from(cast(m64.params(), DType::kF32));
  m32.zero_grad();
  m32.forward(batch);
  m32.backward(1.0);
  EXPECT_LE(rel_error(m32.grads(), m64.grads()), 1e-4);
}

TEST(LlamaModel, WholeModelGradientMatchesFiniteDifferences) { check_whole_model_gradient(tiny()); }

// The tied weight's gradient is the sum of the lookup's and the head's; scaled RoPE's and a free
// head_dim's through the whole model.
TEST(LlamaModel, TiedScaledRopeFreeHeadDimGradientMatchesFiniteDifferences) {
  check_whole_model_gradient(testing::tiny_llama3());
}

TEST(LlamaModel, QkvBiasesTiedGradientMatchesFiniteDifferences) { check_whole_model_gradient(testing::tiny_qwen2()); }

TEST(LlamaParams, TiedHasNoLmHeadAndBiasesAreNamed) {
  const LlamaConfig c = testing::tiny_qwen2();
  const std::vector<ParamEntry> layout = param_layout(c);
  EXPECT_EQ(layout.back().name, "model.norm.weight");
  EXPECT_EQ(layout[5].name, "model.layers.0.self_attn.q_proj.bias");
  EXPECT_EQ(layout[6].shape, (Shape{16}));  // k_proj.bias: n_kv_heads * head_dim
  LlamaModel m(c);
  m.init(3);
  EXPECT_EQ(m.weights().lm_head.data<float>(), m.weights().embed.data<float>());
  for (float b : m.weights().layers[0].q_bias.to_vector<float>()) EXPECT_EQ(b, 0.0f);  // HF initialises biases to 0
  const LlamaConfig l3 = testing::tiny_llama3();
  EXPECT_EQ(param_layout(l3)[2].shape, (Shape{48, 32}));  // q_proj: 4 heads x head_dim 12 on d_model 32
  EXPECT_EQ(param_layout(l3)[5].shape, (Shape{32, 48}));  // o_proj
}

TEST(LlamaModel, PackingDocumentsEqualsRunningThemAlone) {
  const LlamaConfig c = tiny();
  const std::vector<std::vector<int32_t>> docs{bytes_of("packed sequences"), bytes_of("do not"), bytes_of("leak")};
  LlamaModel m(c);
  m.init(5);
  m.zero_grad();
  const double packed = m.forward(pack_documents(docs));
  m.backward(1.0);
  const Tensor packed_grad = m.grads().clone();
  m.zero_grad();
  double alone = 0;
  for (const auto& d : docs) {
    alone += m.forward(pack_documents({d}));
    m.backward(1.0);  // accumulates across the three calls
  }
  EXPECT_NEAR(packed, alone, 1e-5 * std::abs(alone));  // f32 sums over ~30 tokens
  EXPECT_LE(rel_error(m.grads(), packed_grad), 1e-5);
}

// 300 AdamW steps on one fixed 65-byte text. The bound, mean loss < 0.05 nats/token, is far below
// both the uniform start (ln 256 = 5.55) and the unigram entropy of the targets (3.6 nats), so only
// memorising the sequence (which needs attention and position information) passes.
TEST(LlamaModel, OverfitsAShortText) {
  const LlamaConfig c = tiny();
  const Batch batch = pack_documents({bytes_of("The quick brown fox jumps over the lazy dog; 0123456789 ABCDEFGH.")});
  const double tokens = batch.tokens.dim(0) - 1;
  LlamaModel m(c);
  m.init(11);
  Tensor mom = Tensor::zeros(m.params().shape(), DType::kF32), var = mom.clone();
  double first = 0, last = 0;
  for (int step = 1; step <= 300; ++step) {
    m.zero_grad();
    last = m.forward(batch) / tokens;
    if (step == 1) first = last;
    m.backward(1.0 / tokens);
    adamw_step(m.params(), m.grads(), mom, var, {.lr = 1e-2f, .step = step}, std::sqrt(sum_squares(m.grads())), 1.0);
  }
  EXPECT_NEAR(first, std::log(256.0), 0.1);  // small init: nearly uniform predictions
  EXPECT_LT(last, 0.05);
}

}  // namespace
}  // namespace hdp::ops::model
