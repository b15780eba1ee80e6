// The tensor-core attention (kernels/cuda/flash_attention.h, bf16 inputs, fp32 accumulation)
// against the fp32 CPU attention run on the same bf16-rounded inputs, forward and backward, on the
// layouts ring attention uses: packed sequences with GQA (one of length 1), a causal query block at
// an offset key block, a non-causal block, and a sequence spanning many 64-row tiles.
//
// Tolerances (norm-wise relative): the scores are exact products of bf16 values summed in fp32, so
// the LSE differs from the reference by summation order only: 1e-4. The kernel rounds P to bf16
// (8 significant bits, relative error up to 2^-9) before P V, so the output is within a few 2^-9:
// 1e-2. The backward also rounds dS: 2e-2. An indexing or masking error gives errors of order 1.
// Label gpu: without a CUDA device every case is skipped with a message.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/flash_attention.h"
#include "common/error.h"
#include "ops/attention.h"
#include "tests/kernels/attention_cases.h"
#include "tests/ops/grad_check.h"

namespace hdp::ops {
namespace {

using testing::rel_error;

float bf16_round(float x) {  // nearest bf16, ties to even (no NaN in these inputs)
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u += 0x7FFFu + ((u >> 16) & 1u);
  u &= 0xFFFF0000u;
  std::memcpy(&x, &u, 4);
  return x;
}

Tensor rounded(const Shape& s, uint64_t seed) {
  std::vector<float> v = testing::random_tensor(s, DType::kF32, seed).to_vector<float>();
  for (float& x : v) x = bf16_round(x);
  return Tensor::from_vector(v, s);
}

// A device bf16 copy of an f32 CPU tensor, through the kernel under test's own conversion.
kernels::cuda::DeviceBuffer<uint16_t> to_bf16(const Tensor& t) {
  const Tensor d = t.to(Device::kCuda);
  kernels::cuda::DeviceBuffer<uint16_t> out(static_cast<size_t>(t.numel()));
  kernels::cuda::f32_to_bf16(d.data<float>(), out.get(), t.numel(), Stream{});
  return out;
}

kernels::AttentionLayout layout_of(const AttentionSpec& spec, int64_t tq, int64_t tk, int heads, int kv_heads, int d) {
  kernels::AttentionLayout l;
  l.tq = tq;
  l.tk = tk;
  l.n_heads = heads;
  l.n_kv_heads = kv_heads;
  l.head_dim = d;
  l.scale = spec.scale > 0 ? spec.scale : 1.0 / std::sqrt(double(d));
  l.causal = spec.causal;
  l.cu_q = spec.cu_q;
  l.cu_k = spec.cu_k;
  l.q_pos = spec.q_pos;
  l.k_pos = spec.k_pos;
  return l;
}

class FlashAttention : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device on this machine: tensor-core attention not checked";
  }
};

TEST_F(FlashAttention, ConversionRoundsToNearestEven) {
  const Tensor x = testing::random_tensor({4099}, DType::kF32, 1, -1e3, 1e3);
  const std::vector<float> host = x.to_vector<float>();
  const std::vector<uint16_t> dev = to_bf16(x).to_host(Stream{});
  for (size_t i = 0; i < host.size(); ++i) {
    uint32_t u;
    const float r = bf16_round(host[i]);
    std::memcpy(&u, &r, 4);
    ASSERT_EQ(dev[i], uint16_t(u >> 16)) << "element " << i << " = " << host[i];
  }
}

TEST_F(FlashAttention, ForwardBackwardMatchTheFp32ReferenceOnBf16Inputs) {
  std::vector<testing::AttentionCase> cases = testing::ring_attention_cases(64, 128, 128);
  cases.push_back({"long sequence", AttentionSpec::packed({0, 1000}), 1000, 1000, 2, 1, 128});
  uint64_t seed = 10;
  for (const testing::AttentionCase& cs : cases) {
    SCOPED_TRACE(cs.name);
    const Tensor q = rounded({cs.tq, cs.heads, cs.head_dim}, seed++), k = rounded({cs.tk, cs.kv_heads, cs.head_dim}, seed++),
                 v = rounded({cs.tk, cs.kv_heads, cs.head_dim}, seed++), dout = rounded(q.shape(), seed++),
                 dlse = testing::random_tensor({cs.tq, cs.heads}, DType::kF32, seed++);
    const AttentionOutput ref = attention_forward(q, k, v, cs.spec);
    const kernels::AttentionLayout l = layout_of(cs.spec, cs.tq, cs.tk, cs.heads, cs.kv_heads, cs.head_dim);
    const auto qb = to_bf16(q), kb = to_bf16(k), vb = to_bf16(v), dob = to_bf16(dout);
    const Tensor out = Tensor::zeros(q.shape(), DType::kF32, Device::kCuda),
                 lse = Tensor::zeros({cs.tq, cs.heads}, DType::kF32, Device::kCuda);
    kernels::cuda::flash_attention_forward(l, qb.get(), kb.get(), vb.get(), out.data<float>(), lse.data<float>(),
                                           Stream{});
    EXPECT_LE(rel_error(out.to(Device::kCpu), ref.out), 1e-2) << "out";
    EXPECT_LE(rel_error(lse.to(Device::kCpu), ref.lse), 1e-4) << "lse";

    Tensor dq = Tensor::zeros(q.shape(), DType::kF32), dk = Tensor::zeros(k.shape(), DType::kF32),
           dv = Tensor::zeros(v.shape(), DType::kF32);
    attention_backward(q, k, v, cs.spec, ref, dout, dlse, dq, dk, dv);
    const Tensor dqg = Tensor::zeros(q.shape(), DType::kF32, Device::kCuda),
                 dkg = Tensor::zeros(k.shape(), DType::kF32, Device::kCuda),
                 dvg = Tensor::zeros(v.shape(), DType::kF32, Device::kCuda), dlse_g = dlse.to(Device::kCuda);
    kernels::cuda::flash_attention_backward(l, qb.get(), kb.get(), vb.get(), out.data<float>(), lse.data<float>(),
                                            dob.get(), dlse_g.data<float>(), dqg.data<float>(), dkg.data<float>(),
                                            dvg.data<float>(), Stream{});
    EXPECT_LE(rel_error(dqg.to(Device::kCpu), dq), 2e-2) << "dq";
    EXPECT_LE(rel_error(dkg.to(Device::kCpu), dk), 2e-2) << "dk";
    EXPECT_LE(rel_error(dvg.to(Device::kCpu), dv), 2e-2) << "dv";
  }
}

TEST_F(FlashAttention, RefusesAHeadDimItHasNoKernelFor) {
  const AttentionSpec spec = AttentionSpec::packed({0, 8});
  const kernels::AttentionLayout l = layout_of(spec, 8, 8, 1, 1, 96);
  EXPECT_FALSE(kernels::cuda::flash_attention_supports(96));
  EXPECT_THROW(kernels::cuda::flash_attention_forward(l, nullptr, nullptr, nullptr, nullptr, nullptr, Stream{}),
               InvalidArgument);
}

}  // namespace
}  // namespace hdp::ops
