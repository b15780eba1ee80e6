// Every CUDA kernel against its CPU reference (llm.c's pattern), through the ops on fresh random
// inputs: the same op runs on CPU tensors and on their device copies, and the results must agree to
// 1e-5 relative (norm-wise; fp32 with a different summation order and device expf/powf, which are
// within 2 ulp). Label gpu: without a CUDA device every case is skipped with a message.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/cuda/memory.h"
#include "ops/adamw.h"
#include "ops/add.h"
#include "ops/attention.h"
#include "ops/cross_entropy.h"
#include "ops/current_stream.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "ops/model/llama_model.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "ops/swiglu.h"
#include "tests/kernels/attention_cases.h"
#include "tests/ops/grad_check.h"
#include "tests/ops/tiny_llama.h"

namespace hdp::ops {
namespace {

using testing::rel_error;
constexpr double kTol = 1e-5;

class CudaVsCpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device on this machine: CUDA kernels not checked";
  }
  static Tensor rnd(const Shape& s, uint64_t seed) { return testing::random_tensor(s, DType::kF32, seed); }
  static Tensor gpu(const Tensor& t) { return t.to(Device::kCuda); }
  static Tensor zeros_gpu(const Shape& s) { return Tensor::zeros(s, DType::kF32, Device::kCuda); }
  static Tensor zeros_cpu(const Shape& s) { return Tensor::zeros(s, DType::kF32); }
  static void expect_close(const Tensor& device, const Tensor& host, const char* what) {
    EXPECT_LE(rel_error(device.to(Device::kCpu), host), kTol) << what;
  }
};

TEST_F(CudaVsCpu, EmbeddingRmsNormSwiGluRopeLinearAdd) {
  const Tensor tok = Tensor::from_vector<int32_t>({5, 1, 5, 0, 7, 2}, {6});
  const Tensor w = rnd({8, 64}, 1), dout = rnd({6, 64}, 2);
  expect_close(embedding_forward(gpu(tok), gpu(w)), embedding_forward(tok, w), "embedding forward");
  Tensor dw_c = zeros_cpu({8, 64}), dw_g = zeros_gpu({8, 64});
  embedding_backward(tok, dout, dw_c);
  embedding_backward(gpu(tok), gpu(dout), dw_g);
  expect_close(dw_g, dw_c, "embedding backward");

  const Tensor x = rnd({37, 300}, 3), nw = rnd({300}, 4), dy = rnd({37, 300}, 5);
  const RmsNormOutput rc = rmsnorm_forward(x, nw, 1e-5), rg = rmsnorm_forward(gpu(x), gpu(nw), 1e-5);
  expect_close(rg.y, rc.y, "rmsnorm forward");
  Tensor dxc = zeros_cpu(x.shape()), dwc = zeros_cpu({300}), dxg = zeros_gpu(x.shape()), dwg = zeros_gpu({300});
  rmsnorm_backward(x, nw, rc.rstd, dy, dxc, dwc);
  rmsnorm_backward(gpu(x), gpu(nw), rg.rstd, gpu(dy), dxg, dwg);
  expect_close(dxg, dxc, "rmsnorm dx");
  expect_close(dwg, dwc, "rmsnorm dweight");

  const Tensor g = rnd({1000}, 6), u = rnd({1000}, 7), dh = rnd({1000}, 8);
  expect_close(swiglu_forward(gpu(g), gpu(u)), swiglu_forward(g, u), "swiglu forward");
  Tensor dgc = zeros_cpu({1000}), duc = zeros_cpu({1000}), dgg = zeros_gpu({1000}), dug = zeros_gpu({1000});
  swiglu_backward(g, u, dh, dgc, duc);
  swiglu_backward(gpu(g), gpu(u), gpu(dh), dgg, dug);
  expect_close(dgg, dgc, "swiglu dgate");
  expect_close(dug, duc, "swiglu dup");

  const Tensor pos = Tensor::from_vector<int64_t>({0, 3, 17, 1000, 4095}, {5});
  const Tensor xr = rnd({5, 3, 64}, 9);
  // Llama 3's scaled frequencies (Llama 3.2's rope_scaling): the kernels read the table they are given.
  model::LlamaConfig scaled;
  scaled.d_model = 192;
  scaled.n_heads = 3;
  scaled.rope_theta = 500000.0;
  scaled.rope_scaling = {.type = model::RopeType::kLlama3, .factor = 32.0, .original_max_positions = 8192};
  const Tensor inv = rope_table(scaled.rope_inv_freq(), DType::kF32);
  expect_close(rope_forward(gpu(xr), gpu(pos), gpu(inv)), rope_forward(xr, pos, inv), "rope forward");
  Tensor rc_dx = zeros_cpu(xr.shape()), rg_dx = zeros_gpu(xr.shape());
  rope_backward(xr, pos, inv, rc_dx);
  rope_backward(gpu(xr), gpu(pos), gpu(inv), rg_dx);
  expect_close(rg_dx, rc_dx, "rope backward");

  const Tensor a = rnd({33, 70}, 10), wl = rnd({45, 70}, 11), dl = rnd({33, 45}, 12);
  expect_close(linear_forward(gpu(a), gpu(wl)), linear_forward(a, wl), "linear forward");
  Tensor ldx_c = zeros_cpu(a.shape()), ldw_c = zeros_cpu(wl.shape()), ldx_g = zeros_gpu(a.shape()),
         ldw_g = zeros_gpu(wl.shape());
  linear_backward(a, wl, dl, ldx_c, ldw_c);
  linear_backward(gpu(a), gpu(wl), gpu(dl), ldx_g, ldw_g);
  expect_close(ldx_g, ldx_c, "linear dx");
  expect_close(ldw_g, ldw_c, "linear dweight");

  Tensor sum_c = a.clone(), sum_g = gpu(a);
  add_(sum_c, a);
  add_(sum_g, gpu(a));
  expect_close(sum_g, sum_c, "add_");
}

TEST_F(CudaVsCpu, CrossEntropyAdamWAndNorm) {
  const Tensor logits = rnd({20, 256}, 13);
  std::vector<int32_t> t(20);
  for (int i = 0; i < 20; ++i) t[size_t(i)] = i % 5 == 4 ? -1 : (i * 37) % 256;
  const Tensor targets = Tensor::from_vector(t, {20});
  const CrossEntropyOutput c = cross_entropy_forward(logits, targets), g = cross_entropy_forward(gpu(logits), gpu(targets));
  EXPECT_NEAR(g.loss_sum, c.loss_sum, kTol * c.loss_sum);
  expect_close(g.lse, c.lse, "cross-entropy lse");
  Tensor dc = zeros_cpu(logits.shape()), dg = zeros_gpu(logits.shape());
  cross_entropy_backward(logits, targets, c.lse, 0.5, dc);
  cross_entropy_backward(gpu(logits), gpu(targets), g.lse, 0.5, dg);
  expect_close(dg, dc, "cross-entropy backward");

  const Tensor p = rnd({5000}, 14), gr = rnd({5000}, 15);
  EXPECT_NEAR(sum_squares(gpu(gr)), sum_squares(gr), 1e-9 * sum_squares(gr));
  Tensor pc = p.clone(), mc = zeros_cpu({5000}), vc = zeros_cpu({5000});
  Tensor pg = gpu(p), mg = zeros_gpu({5000}), vg = zeros_gpu({5000});
  for (int step = 1; step <= 3; ++step) {
    const AdamWParams hp{.lr = 1e-2f, .weight_decay = 0.1f, .step = step};
    adamw_step(pc, gr, mc, vc, hp, 50.0, 10.0);
    adamw_step(pg, gpu(gr), mg, vg, hp, 50.0, 10.0);
  }
  expect_close(pg, pc, "adamw params");
  expect_close(vg, vc, "adamw second moment");
}

// Packed GQA self-attention, and a query block against an offset key block with dlse (ring step).
TEST_F(CudaVsCpu, AttentionForwardBackwardAndMerge) {
  uint64_t seed = 20;
  for (const testing::AttentionCase& cs : testing::ring_attention_cases(64, 128, 32)) {
    const Tensor q = rnd({cs.tq, cs.heads, cs.head_dim}, seed++), k = rnd({cs.tk, cs.kv_heads, cs.head_dim}, seed++),
                 v = rnd({cs.tk, cs.kv_heads, cs.head_dim}, seed++), dout = rnd(q.shape(), seed++),
                 dlse = rnd({cs.tq, cs.heads}, seed++);
    const AttentionOutput c = attention_forward(q, k, v, cs.spec);
    const AttentionOutput g = attention_forward(gpu(q), gpu(k), gpu(v), cs.spec);
    expect_close(g.out, c.out, cs.name);
    expect_close(g.lse, c.lse, cs.name);
    Tensor dqc = zeros_cpu(q.shape()), dkc = zeros_cpu(k.shape()), dvc = zeros_cpu(v.shape());
    Tensor dqg = zeros_gpu(q.shape()), dkg = zeros_gpu(k.shape()), dvg = zeros_gpu(v.shape());
    attention_backward(q, k, v, cs.spec, c, dout, dlse, dqc, dkc, dvc);
    attention_backward(gpu(q), gpu(k), gpu(v), cs.spec, g, gpu(dout), gpu(dlse), dqg, dkg, dvg);
    expect_close(dqg, dqc, cs.name);
    expect_close(dkg, dkc, cs.name);
    expect_close(dvg, dvc, cs.name);
  }

  const AttentionOutput a{rnd({30, 4, 16}, 40), rnd({30, 4}, 41)}, b{rnd({30, 4, 16}, 42), rnd({30, 4}, 43)};
  const AttentionOutput ag{gpu(a.out), gpu(a.lse)}, bg{gpu(b.out), gpu(b.lse)};
  const AttentionOutput mc = attention_merge_forward(a, b), mg = attention_merge_forward(ag, bg);
  expect_close(mg.out, mc.out, "merge out");
  expect_close(mg.lse, mc.lse, "merge lse");
  const Tensor dout = rnd({30, 4, 16}, 44), dl = rnd({30, 4}, 45);
  const AttentionOutput dac{zeros_cpu({30, 4, 16}), zeros_cpu({30, 4})}, dbc{zeros_cpu({30, 4, 16}), zeros_cpu({30, 4})};
  const AttentionOutput dag{zeros_gpu({30, 4, 16}), zeros_gpu({30, 4})}, dbg{zeros_gpu({30, 4, 16}), zeros_gpu({30, 4})};
  attention_merge_backward(a, b, mc, dout, dl, dac, dbc);
  attention_merge_backward(ag, bg, mg, gpu(dout), gpu(dl), dag, dbg);
  expect_close(dag.out, dac.out, "merge dout1");
  expect_close(dag.lse, dac.lse, "merge dlse1");
  expect_close(dbg.lse, dbc.lse, "merge dlse2");
}

// The model shape of the step tests below: 2 layers, d_model 64, 4 query heads on 2 kv heads.
model::LlamaConfig small_llama() {
  model::LlamaConfig config;
  config.d_model = 64;
  config.n_layers = 2;
  config.n_heads = 4;
  config.n_kv_heads = 2;
  config.ffn_dim = 128;
  return config;
}

// The whole model on the device against the CPU: every op chained, so the bound is 1e-4. Also
// with Llama 3.2's features (llama3 RoPE scaling, tied embeddings, a free head_dim) and with
// Qwen2's q/k/v biases (tests/ops/tiny_llama.h).
void expect_model_step_matches(const model::LlamaConfig& config) {
  model::LlamaModel cpu(config), dev(config, DType::kF32, Device::kCuda);
  cpu.init(3);
  dev.params().copy_from(cpu.params());
  std::vector<int32_t> doc1(90), doc2(40);
  for (size_t i = 0; i < doc1.size(); ++i) doc1[i] = int32_t((i * 31) % 256);
  for (size_t i = 0; i < doc2.size(); ++i) doc2[i] = int32_t((i * 7 + 3) % 256);
  cpu.zero_grad();
  dev.zero_grad();
  const double lc = cpu.forward(model::pack_documents({doc1, doc2}));
  const double lg = dev.forward(model::pack_documents({doc1, doc2}, Device::kCuda));
  EXPECT_NEAR(lg, lc, 1e-5 * lc);
  cpu.backward(1.0);
  dev.backward(1.0);
  EXPECT_LE(rel_error(dev.grads().to(Device::kCpu), cpu.grads()), 1e-4);
}

TEST_F(CudaVsCpu, LlamaModelStep) {
  expect_model_step_matches(small_llama());
  expect_model_step_matches(testing::tiny_llama3());
  expect_model_step_matches(testing::tiny_qwen2());
}

// The same step with every kernel queued on a stream of its own (ops::StreamScope): the dispatch
// point hands the thread's current stream to every CUDA launcher. Same kernels, same inputs: the
// loss is bit-identical; the gradients differ only by the order of float atomics (embedding and
// RMSNorm weight gradients), far below 1e-6.
TEST_F(CudaVsCpu, ModelStepOnItsOwnStreamMatchesTheDefaultStream) {
  const model::LlamaConfig config = small_llama();
  model::LlamaModel on_default(config, DType::kF32, Device::kCuda), on_stream(config, DType::kF32, Device::kCuda);
  on_default.init(5);
  on_stream.params().copy_from(on_default.params());
  std::vector<int32_t> doc(120);
  for (size_t i = 0; i < doc.size(); ++i) doc[i] = int32_t((i * 13 + 1) % 256);
  on_default.zero_grad();
  on_stream.zero_grad();
  const double l0 = on_default.forward(model::pack_documents({doc}, Device::kCuda));
  on_default.backward(1.0);
  const Stream stream = kernels::cuda::stream_create();
  double l1 = 0;
  {
    StreamScope scope(stream);
    EXPECT_EQ(current_stream().handle, stream.handle);
    l1 = on_stream.forward(model::pack_documents({doc}, Device::kCuda));
    on_stream.backward(1.0);
    kernels::cuda::stream_synchronize(stream);
  }
  EXPECT_EQ(current_stream().handle, nullptr);
  kernels::cuda::stream_destroy(stream);
  EXPECT_EQ(l1, l0);
  EXPECT_LE(rel_error(on_stream.grads().to(Device::kCpu), on_default.grads().to(Device::kCpu)), 1e-6);
}

}  // namespace
}  // namespace hdp::ops
