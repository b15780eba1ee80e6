// bf16 mixed precision on CUDA against the same ops on the CPU, through the ops: the conversion,
// the bf16 GEMMs of linear, the bf16 attention, and a whole LlamaModel step under Precision::kBF16.
// The CPU is the reference: it widens every bf16 operand to f32 (exactly) and runs the f32 kernels,
// so where CUDA also accumulates in f32 the two differ by summation order only, and where CUDA's
// tensor-core attention rounds an intermediate to bf16 the bound is cuda_flash_test.cc's. Each
// bound is explained where it is asserted; an indexing, layout or dtype error gives errors of
// order 1. Label gpu: without a CUDA device every case is skipped with a message.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ops/attention.h"
#include "ops/convert.h"
#include "ops/linear.h"
#include "ops/model/llama_model.h"
#include "tests/ops/grad_check.h"

namespace hdp::ops {
namespace {

using testing::rel_error;

class CudaMixed : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device on this machine: bf16 mixed precision on CUDA not checked";
  }
};

// max |a - b| / max |b| over f32 tensors on any device (infinite when either holds a non-finite).
double max_rel_error(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to(Device::kCpu).to_vector<float>(), y = b.to(Device::kCpu).to_vector<float>();
  EXPECT_EQ(x.size(), y.size());
  double diff = 0, ref = 0;
  for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) {
    if (!std::isfinite(x[i]) || !std::isfinite(y[i])) return INFINITY;
    diff = std::max(diff, std::abs(double(x[i]) - double(y[i])));
    ref = std::max(ref, std::abs(double(y[i])));
  }
  return diff / std::max(ref, 1e-30);
}

// Records a measured error in the test's XML output (--gtest_output=xml) and returns it.
double measured(const std::string& what, double value) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3e", value);
  ::testing::Test::RecordProperty(what, buf);
  return value;
}

// A CPU bf16 tensor of uniform [-1, 1) values rounded to bf16.
Tensor bf16_random(const Shape& shape, uint64_t seed) {
  return to_dtype(testing::random_tensor(shape, DType::kF32, seed), DType::kBF16);
}

void expect_f32_on_cuda(const Tensor& t, const char* what) {
  EXPECT_EQ(t.dtype(), DType::kF32) << what;
  EXPECT_EQ(t.device(), Device::kCuda) << what;
}

bool is_bf16_nan(uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x007fu) != 0; }

// ---- (a) conversion ----------------------------------------------------------------------------

// f32 -> bf16 on CUDA gives the CPU's bits (NaN: a NaN, whose payload the device canonicalises),
// and bf16 -> f32 of every one of the 65,536 patterns too. Exact: there is nothing to tolerate.
TEST_F(CudaMixed, ConversionMatchesTheCpuBitForBit) {
  // Hand-picked patterns with the result round-to-nearest-even must give, so the test also fails
  // if both devices round the same wrong way.
  const std::vector<std::pair<uint32_t, uint16_t>> expected = {
      {0x3f808000u, 0x3f80u},  // 1 + 2^-8: a tie, kept even
      {0x3f818000u, 0x3f82u},  // a tie above an odd pattern: up to even
      {0xbf808000u, 0xbf80u},  // negative ties alike
      {0xbf818000u, 0xbf82u},
      {0x3f807fffu, 0x3f80u},  // just below a tie: down
      {0x3f808001u, 0x3f81u},  // just above: up
      {0x7f7f8000u, 0x7f80u},  // a tie above the largest odd pattern: overflows to +inf
      {0x7f7fffffu, 0x7f80u},  // FLT_MAX: +inf
      {0x7f7f7fffu, 0x7f7fu},  // the largest value that stays finite
      {0xff7fffffu, 0xff80u},  // -FLT_MAX: -inf
      {0x00800000u, 0x0080u},  // FLT_MIN
      {0x00008000u, 0x0000u},  // a subnormal tie below an even pattern: to zero
      {0x00018000u, 0x0002u},  // a subnormal tie above an odd one: up
      {0x00000001u, 0x0000u},  // the smallest subnormal: to zero
      {0x80000001u, 0x8000u},  // ... keeping its sign
      {0x00000000u, 0x0000u},
      {0x80000000u, 0x8000u},
      {0x7f800000u, 0x7f80u},  // +inf
      {0xff800000u, 0xff80u},  // -inf
  };
  std::vector<float> values;
  for (const auto& e : expected) values.push_back(std::bit_cast<float>(e.first));
  // NaNs, among them one whose payload lies only in the low 16 bits (a naive rounding makes it inf).
  for (uint32_t bits : {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fbfffffu, 0x7fffffffu})
    values.push_back(std::bit_cast<float>(bits));
  std::mt19937 rng(17);
  for (int i = 0; i < 100000; ++i) values.push_back(std::bit_cast<float>(uint32_t(rng())));  // every exponent
  std::uniform_real_distribution<float> dist(-1e3f, 1e3f);
  for (int i = 0; i < 100000; ++i) values.push_back(dist(rng));
  const int64_t n = int64_t(values.size());
  const Tensor x = Tensor::from_vector(values, {n});

  const Tensor down_cpu = to_dtype(x, DType::kBF16), down_cuda = to_dtype(x.to(Device::kCuda), DType::kBF16);
  EXPECT_EQ(down_cuda.dtype(), DType::kBF16);
  EXPECT_EQ(down_cuda.device(), Device::kCuda);
  const std::vector<uint16_t> c = down_cpu.to_vector<uint16_t>(), g = down_cuda.to_vector<uint16_t>();
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_EQ(g[i], expected[i].second) << std::hex << "f32 0x" << expected[i].first;
  int64_t mismatches = 0, nans = 0;
  std::string first;
  for (size_t i = 0; i < values.size(); ++i) {
    const bool ok = std::isnan(values[i]) ? is_bf16_nan(c[i]) && is_bf16_nan(g[i]) : c[i] == g[i];
    nans += std::isnan(values[i]);
    if (!ok && mismatches++ == 0) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "f32 0x%08x: cpu 0x%04x, cuda 0x%04x", std::bit_cast<uint32_t>(values[i]),
                    unsigned(c[i]), unsigned(g[i]));
      first = buf;
    }
  }
  EXPECT_EQ(mismatches, 0) << "first: " << first;
  EXPECT_GT(nans, 6);  // the random bit patterns include NaNs too

  // Back up: every bf16 pattern widened on CUDA equals the CPU's widening (NaN for NaN).
  std::vector<uint16_t> patterns(65536);
  for (size_t i = 0; i < patterns.size(); ++i) patterns[i] = uint16_t(i);
  const Tensor b = Tensor::from_vector(patterns, {65536});
  const std::vector<float> up_cpu = to_dtype(b, DType::kF32).to_vector<float>(),
                           up_cuda = to_dtype(b.to(Device::kCuda), DType::kF32).to_vector<float>();
  mismatches = 0;
  for (size_t i = 0; i < patterns.size(); ++i) {
    const bool ok = is_bf16_nan(patterns[i])
                        ? std::isnan(up_cpu[i]) && std::isnan(up_cuda[i])
                        : std::bit_cast<uint32_t>(up_cpu[i]) == std::bit_cast<uint32_t>(up_cuda[i]) &&
                              std::bit_cast<uint32_t>(up_cpu[i]) == uint32_t(patterns[i]) << 16;
    mismatches += !ok;
  }
  EXPECT_EQ(mismatches, 0);

  // The round trip f32 -> bf16 -> f32 through convert_into into existing storage, on each device.
  const Tensor back_cpu = Tensor::empty({n}, DType::kF32), back_cuda = Tensor::empty({n}, DType::kF32, Device::kCuda);
  convert_into(down_cpu, back_cpu);
  convert_into(down_cuda, back_cuda);
  const std::vector<float> rc = back_cpu.to_vector<float>(), rg = back_cuda.to_vector<float>();
  mismatches = 0;
  for (size_t i = 0; i < values.size(); ++i)
    mismatches += std::isnan(values[i]) ? !(std::isnan(rc[i]) && std::isnan(rg[i]))
                                        : std::bit_cast<uint32_t>(rc[i]) != std::bit_cast<uint32_t>(rg[i]);
  EXPECT_EQ(mismatches, 0);
}

// ---- (b) linear --------------------------------------------------------------------------------

// bf16 x, W and dy; y, dx and dW f32. A product of two bf16 values (8 significant bits each) is
// exact in f32, so cuBLAS's bf16 GEMM (f32 accumulation) and the CPU's sgemm on the widened operands
// sum the same exact terms and differ by the order and rounding of the f32 additions alone: each
// entry is a sum of K = 256 (y), 192 (dx) or 300 (dW) terms of size up to 1, rounded at 2^-24
// relative (tensor cores truncate, 2^-23), which with terms of random sign stays near
// sqrt(K) * 2^-23 ~ 2e-6 of the largest entry: 1e-5 (measured on an H200: 3e-7 to 5e-7, so a margin
// of 20x). A transposed operand, a wrong leading dimension, a dropped accumulation (beta) or bf16
// bits read as something else gives errors of order 1.
TEST_F(CudaMixed, LinearBf16MatchesTheCpu) {
  constexpr double kTol = 1e-5;
  const int64_t n = 300, in = 256, out = 192;
  const Tensor x = bf16_random({n, in}, 1), w = bf16_random({out, in}, 2), dy = bf16_random({n, out}, 3);
  const Tensor xg = x.to(Device::kCuda), wg = w.to(Device::kCuda), dyg = dy.to(Device::kCuda);
  const Tensor y = linear_forward(x, w), yg = linear_forward(xg, wg);
  expect_f32_on_cuda(yg, "y");
  EXPECT_LE(measured("linear_y", max_rel_error(yg, y)), kTol) << "y";

  // The gradients add into what the buffers hold: start both devices from the same f32 values.
  const Tensor dx0 = testing::random_tensor({n, in}, DType::kF32, 4), dw0 = testing::random_tensor({out, in}, DType::kF32, 5);
  const Tensor dx = dx0.clone(), dw = dw0.clone(), dxg = dx0.to(Device::kCuda), dwg = dw0.to(Device::kCuda);
  linear_backward(x, w, dy, dx, dw);
  linear_backward(xg, wg, dyg, dxg, dwg);
  EXPECT_LE(measured("linear_dx", max_rel_error(dxg, dx)), kTol) << "dx";
  EXPECT_LE(measured("linear_dw", max_rel_error(dwg, dw)), kTol) << "dweight";
  EXPECT_GT(max_rel_error(dx, dx0), 1.0) << "the backward added nothing to dx";

  // Without dx (an input that needs no gradient): dW accumulates a second time.
  linear_backward(x, w, dy, Tensor(), dw);
  linear_backward(xg, wg, dyg, Tensor(), dwg);
  EXPECT_LE(measured("linear_dw2", max_rel_error(dwg, dw)), kTol) << "dweight, second accumulation";
}

// ---- (c) attention -----------------------------------------------------------------------------

// bf16 q, k, v and dout on packed causal GQA sequences; out, lse and the gradients f32. On CUDA,
// head_dim 64 and 128 run the tensor-core kernel; on the CPU the operands are widened to f32 and the
// f32 kernel runs: exactly cuda_flash_test.cc's comparison (the tensor-core kernel against the f32
// CPU attention on bf16-rounded inputs), made here through the ops, so its bounds (norm-wise
// relative) apply: the scores are exact products of bf16 values summed in f32, so the LSE differs
// by summation order only: 1e-4. The kernel rounds P to bf16 (8 significant bits, relative error up
// to 2^-9) before P V, so the output is within a few 2^-9: 1e-2. The backward also rounds dS (and
// P again before dV = P^T dO): 2e-2. Measured on an H200: out 1.3e-3, lse 5e-8, dq/dk/dv 1.5e-3 to
// 1.7e-3 (the same as cuda_flash_test's direct calls). A masking, sequence-offset or GQA
// head-mapping error, or a result read in the wrong dtype, gives errors of order 1.
TEST_F(CudaMixed, AttentionBf16MatchesTheCpu) {
  struct Case {
    const char* name;
    std::vector<int32_t> cu;
    int heads, kv_heads, head_dim;
    bool with_dlse;
  };
  const std::vector<Case> cases = {
      {"head_dim 64, three sequences (one of length 1)", {0, 130, 131, 300}, 8, 2, 64, false},
      {"head_dim 128, two sequences", {0, 180, 300}, 4, 2, 128, false},
      {"head_dim 64, two sequences, dlse", {0, 70, 257}, 4, 1, 64, true},
  };
  uint64_t seed = 10;
  for (const Case& cs : cases) {
    SCOPED_TRACE(cs.name);
    const int64_t t = cs.cu.back();
    const AttentionSpec spec = AttentionSpec::packed(cs.cu);
    const Tensor q = bf16_random({t, cs.heads, cs.head_dim}, seed++), k = bf16_random({t, cs.kv_heads, cs.head_dim}, seed++),
                 v = bf16_random({t, cs.kv_heads, cs.head_dim}, seed++), dout = bf16_random(q.shape(), seed++);
    const Tensor dlse = cs.with_dlse ? testing::random_tensor({t, cs.heads}, DType::kF32, seed++) : Tensor();
    const Tensor qg = q.to(Device::kCuda), kg = k.to(Device::kCuda), vg = v.to(Device::kCuda),
                 doutg = dout.to(Device::kCuda), dlseg = dlse.defined() ? dlse.to(Device::kCuda) : Tensor();
    const AttentionOutput c = attention_forward(q, k, v, spec), g = attention_forward(qg, kg, vg, spec);
    expect_f32_on_cuda(g.out, "out");
    expect_f32_on_cuda(g.lse, "lse");
    const std::string tag = "attention_hd" + std::to_string(cs.head_dim) + (cs.with_dlse ? "_dlse_" : "_");
    EXPECT_LE(measured(tag + "out", rel_error(g.out.to(Device::kCpu), c.out)), 1e-2) << "out";
    EXPECT_LE(measured(tag + "lse", rel_error(g.lse.to(Device::kCpu), c.lse)), 1e-4) << "lse";

    const auto zeros = [](const Shape& s, Device d) { return Tensor::zeros(s, DType::kF32, d); };
    const Tensor dq = zeros(q.shape(), Device::kCpu), dk = zeros(k.shape(), Device::kCpu), dv = zeros(v.shape(), Device::kCpu);
    const Tensor dqg = zeros(q.shape(), Device::kCuda), dkg = zeros(k.shape(), Device::kCuda),
                 dvg = zeros(v.shape(), Device::kCuda);
    attention_backward(q, k, v, spec, c, dout, dlse, dq, dk, dv);
    attention_backward(qg, kg, vg, spec, g, doutg, dlseg, dqg, dkg, dvg);
    EXPECT_LE(measured(tag + "dq", rel_error(dqg.to(Device::kCpu), dq)), 2e-2) << "dq";
    EXPECT_LE(measured(tag + "dk", rel_error(dkg.to(Device::kCpu), dk)), 2e-2) << "dk";
    EXPECT_LE(measured(tag + "dv", rel_error(dvg.to(Device::kCpu), dv)), 2e-2) << "dv";
  }
}

// ---- (d) a model step --------------------------------------------------------------------------

// head_dim 64, so CUDA's attention runs the tensor-core kernel.
model::LlamaConfig mixed_llama() {
  model::LlamaConfig config;
  config.vocab_size = 512;
  config.d_model = 256;
  config.n_layers = 2;
  config.n_heads = 4;
  config.n_kv_heads = 2;
  config.ffn_dim = 512;
  return config;
}

std::vector<std::vector<int32_t>> mixed_docs(int vocab) {
  std::mt19937 rng(23);
  std::vector<std::vector<int32_t>> docs{std::vector<int32_t>(200), std::vector<int32_t>(100)};
  for (auto& doc : docs)
    for (int32_t& x : doc) x = int32_t(rng() % uint32_t(vocab));
  return docs;
}

// One forward and backward of a model that starts from `params`; returns the summed loss.
double step(model::LlamaModel& m, const Tensor& params, const std::vector<std::vector<int32_t>>& docs, Device device) {
  m.params().copy_from(params);
  m.zero_grad();
  const double loss = m.forward(model::pack_documents(docs, device));
  m.backward(1.0);
  return loss;
}

// The whole step under Precision::kBF16 on CUDA against the same on the CPU, from the same f32
// parameters (init_params, std 0.02), 2 layers, head_dim 64, 298 counted tokens in two documents.
// Both devices round the same values to bf16 and accumulate every GEMM in f32; what differs:
//  - the attention: CUDA's tensor-core kernel rounds P to bf16 before P V (and P and dS in the
//    backward), while the CPU widens q, k, v to f32 and keeps P f32. cuda_flash_test.cc bounds that
//    at 1e-2 of the output and 2e-2 of dq/dk/dv (norm-wise; measured ~1.5e-3 in the attention test
//    above). Those errors flow linearly into the q/k/v weight gradients and the layers below; every
//    other gradient sees them only through the forward's attention output, one of the residual
//    stream's terms. So the whole gradient buffer is held to the attention's own 2e-2, as
//    max|difference| / max|g|;
//  - f32 values that differ by summation order can round to neighbouring bf16 values: 2^-8
//    relative on that one operand, averaged down by the GEMMs' sums.
//  The loss is a sum of log-softmax values over 298 tokens; the attention's 1e-2 reaches it only
//  through its share of the logits and averages down: 1e-3 relative.
//  Measured on an H200: loss 5e-6 relative, gradients 4.5e-3 (max-wise; 3.9e-3 norm-wise), so the
//  margins are 200x and 4x; a wrong kernel, layout or missing rounding moves gradients by order 1.
// And bf16 on CUDA against f32 on CUDA (the same parameters): every GEMM and attention operand is
// rounded to 8 significant bits (2^-9 relative, about 1.1e-3 rms), and a gradient's path crosses
// a dozen such roundings, which add in quadrature to ~5e-3 of its size: the loss within 1%
// relative (measured 8e-6: at init the logits are small and the loss is near ln 512, so this bound
// only catches a grossly wrong bf16 path) and the gradients within 3e-2 of max|g| (measured
// 5.5e-3; 6.2e-3 norm-wise): a bf16 path that ran on a stale compute copy of the weights, or read
// bf16 bits as f32, or dropped a term, is off by order 1.
TEST_F(CudaMixed, ModelStepBf16MatchesTheCpu) {
  const model::LlamaConfig config = mixed_llama();
  const std::vector<std::vector<int32_t>> docs = mixed_docs(config.vocab_size);
  model::LlamaModel cpu(config, DType::kF32, Device::kCpu, model::Precision::kBF16),
      dev(config, DType::kF32, Device::kCuda, model::Precision::kBF16), dev32(config, DType::kF32, Device::kCuda);
  cpu.init(3);
  const Tensor params = cpu.params().clone();
  const double lc = step(cpu, params, docs, Device::kCpu);
  const double lg = step(dev, params, docs, Device::kCuda);
  const double l32 = step(dev32, params, docs, Device::kCuda);
  EXPECT_NEAR(lg, lc, 1e-3 * lc);
  measured("model_loss_bf16_cuda_vs_cpu", std::abs(lg - lc) / lc);
  EXPECT_LE(measured("model_grad_bf16_cuda_vs_cpu_max", max_rel_error(dev.grads(), cpu.grads())), 2e-2);
  measured("model_grad_bf16_cuda_vs_cpu_norm", rel_error(dev.grads().to(Device::kCpu), cpu.grads()));
  EXPECT_NEAR(lg, l32, 1e-2 * l32);
  measured("model_loss_bf16_vs_f32_cuda", std::abs(lg - l32) / l32);
  measured("model_loss_per_token_f32_cuda", l32 / 298);
  EXPECT_LE(measured("model_grad_bf16_vs_f32_cuda_max", max_rel_error(dev.grads(), dev32.grads())), 3e-2);
  measured("model_grad_bf16_vs_f32_cuda_norm", rel_error(dev.grads().to(Device::kCpu), dev32.grads().to(Device::kCpu)));
}

}  // namespace
}  // namespace hdp::ops
