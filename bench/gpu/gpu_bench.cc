// bench_gpu: what hdp's own kernels do on one device, as JSON on stdout (scripts/gpu-check.sh runs
// it beside scripts/gpu_torch_baseline.py, which measures PyTorch on the same shapes and machine).
//
//   attention  causal packed self-attention of one sequence of T tokens, forward and backward
//              (the kernels ring attention calls), TFLOP/s counting only the unmasked half;
//   model      one training step of a LLaMA (forward, backward, AdamW over every parameter) on
//              T tokens: tokens/s and model FLOP/s (LlamaConfig::step_flops), one row per
//              (T, --model-dtypes entry): "f32" computes in f32, "bf16" is mixed precision
//              (Precision::kBF16: f32 master weights, bf16 GEMM and attention operands).
//
// Each figure is the median of --reps timed runs after one warm-up, timed on the host around a
// device synchronisation. Sizes run smallest first and a size is skipped when the one before it,
// scaled by its cost, would pass --budget-s, so the command ends in bounded time on any device.
// --device cpu runs the same code on the CPU (small sizes): the rehearsal scripts/gpu-check.sh
// --dry-run does on a machine without a GPU.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <functional>
#include <iostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/median.h"
#include "hdp/config.h"
#include "ops/adamw.h"
#include "ops/attention.h"
#include "ops/model/llama_model.h"
#include "ops/tensor.h"
#if HDP_HAVE_CUDA
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/flash_attention.h"
#include "kernels/cuda/memory.h"
#endif

namespace {

using hdp::ops::Device;
using hdp::ops::DType;
using hdp::ops::Tensor;
using Clock = std::chrono::steady_clock;

void sync(Device device) {
#if HDP_HAVE_CUDA
  if (device == Device::kCuda) hdp::kernels::cuda::device_synchronize();
#else
  (void)device;
#endif
}

Tensor random_tensor(const hdp::ops::Shape& shape, uint64_t seed, Device device) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& x : v) x = dist(rng);
  return Tensor::from_vector(v, shape).to(device);
}

// Median seconds of `reps` runs of fn after one warm-up run.
double time_median(Device device, int reps, const std::function<void()>& fn) {
  fn();
  sync(device);
  std::vector<double> s;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    fn();
    sync(device);
    s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return hdp::median(std::move(s));
}

// One row per sequence length: measure(t) returns {forward seconds, backward seconds}. Lengths run
// smallest first; one whose time, scaled from the last measured by t^2, would pass the budget over
// its reps + 1 runs is skipped with the prediction.
nlohmann::json attention_sweep(const std::vector<int64_t>& lengths, int heads, int head_dim, int reps, double budget_s,
                               const std::function<std::pair<double, double>(int64_t)>& measure) {
  nlohmann::json rows = nlohmann::json::array();
  double last_s = 0;
  int64_t last_t = 0;
  for (const int64_t t : lengths) {
    const double predicted = last_t ? last_s * double(t) * double(t) / (double(last_t) * double(last_t)) : 0;
    if (predicted * (reps + 1) > budget_s) {
      rows.push_back({{"tokens", t}, {"skipped", "predicted " + std::to_string(predicted) + " s per run"}});
      continue;
    }
    const auto [fwd_s, bwd_s] = measure(t);
    const double flops = hdp::ops::model::causal_attention_flops(t, heads, head_dim);
    rows.push_back({{"tokens", t},
                    {"heads", heads},
                    {"head_dim", head_dim},
                    {"forward_s", fwd_s},
                    {"backward_s", bwd_s},
                    {"forward_tflops", flops / fwd_s / 1e12},
                    {"backward_tflops", 2.5 * flops / bwd_s / 1e12}});
    last_s = fwd_s + bwd_s;
    last_t = t;
  }
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_gpu: hdp's kernels on one device (JSON on stdout)"};
  std::string device_name = "cuda";
  std::vector<int64_t> attention_tokens{4096, 8192, 16384, 32768}, model_tokens{8192};
  std::vector<std::string> model_dtypes{"f32", "bf16"};
  int heads = 16, head_dim = 128, reps = 3;
  double budget_s = 60;
  hdp::ops::model::LlamaConfig config;
  config.vocab_size = 32000;
  config.d_model = 2048;
  config.n_layers = 12;
  config.n_heads = 16;
  config.n_kv_heads = 4;
  config.ffn_dim = 5632;
  app.add_option("--device", device_name, "cuda or cpu (the rehearsal)")->check(CLI::IsMember({"cuda", "cpu"}));
  app.add_option("--attention-tokens", attention_tokens, "sequence lengths, comma-separated; 0 for none")
      ->delimiter(',')
      ->check(CLI::NonNegativeNumber);
  app.add_option("--heads", heads, "attention heads (and KV heads) of the attention benchmark");
  app.add_option("--head-dim", head_dim, "head dimension of the attention benchmark");
  app.add_option("--model-tokens", model_tokens, "tokens per micro-batch of the model step, comma-separated")->delimiter(',');
  app.add_option("--model-dtypes", model_dtypes, "precisions of the model step, comma-separated: f32 and/or bf16")
      ->delimiter(',')
      ->check(CLI::IsMember({"f32", "bf16"}));
  app.add_option("--vocab", config.vocab_size);
  app.add_option("--d-model", config.d_model);
  app.add_option("--layers", config.n_layers);
  app.add_option("--model-heads", config.n_heads);
  app.add_option("--model-kv-heads", config.n_kv_heads);
  app.add_option("--ffn", config.ffn_dim);
  app.add_option("--reps", reps, "timed runs per figure (the median is reported)")->check(CLI::Range(1, 100));
  app.add_option("--budget-s", budget_s, "skip a size whose predicted time passes this");
  CLI11_PARSE(app, argc, argv);
  std::erase(attention_tokens, int64_t{0});  // "--attention-tokens 0": the model step alone (scripts/gpu-profile.sh)

  const Device device = device_name == "cuda" ? Device::kCuda : Device::kCpu;
  if (device == Device::kCuda && !hdp::ops::cuda_available()) {
    std::cerr << "bench_gpu: no usable CUDA device\n";
    return 2;
  }
  nlohmann::json out = {{"device", device_name}, {"dtype", "f32"}, {"reps", reps}, {"budget_s", budget_s}};

  // ---- attention (fp32, through the ops) ------------------------------------
  out["attention"] = attention_sweep(attention_tokens, heads, head_dim, reps, budget_s, [&](int64_t t) {
    const Tensor q = random_tensor({t, heads, head_dim}, 1, device), k = random_tensor({t, heads, head_dim}, 2, device),
                 v = random_tensor({t, heads, head_dim}, 3, device), dout = random_tensor({t, heads, head_dim}, 4, device);
    const hdp::ops::AttentionSpec spec = hdp::ops::AttentionSpec::packed({0, static_cast<int32_t>(t)});
    hdp::ops::AttentionOutput fwd;
    const double fwd_s = time_median(device, reps, [&] { fwd = hdp::ops::attention_forward(q, k, v, spec); });
    const Tensor dq = Tensor::zeros(q.shape(), DType::kF32, device), dk = Tensor::zeros(k.shape(), DType::kF32, device),
                 dv = Tensor::zeros(v.shape(), DType::kF32, device);
    const double bwd_s =
        time_median(device, reps, [&] { hdp::ops::attention_backward(q, k, v, spec, fwd, dout, Tensor(), dq, dk, dv); });
    return std::pair{fwd_s, bwd_s};
  });

#if HDP_HAVE_CUDA
  // ---- tensor-core attention (bf16 in, fp32 out) -----------------------------
  const std::vector<int64_t> bf16_lengths = device == Device::kCuda ? attention_tokens : std::vector<int64_t>{};
  out["attention_bf16"] = attention_sweep(bf16_lengths, heads, head_dim, reps, budget_s, [&](int64_t t) {
    namespace kc = hdp::kernels::cuda;
    const int64_t n = t * heads * head_dim;
    const Tensor qf = random_tensor({t, heads, head_dim}, 1, device), kf = random_tensor({t, heads, head_dim}, 2, device),
                 vf = random_tensor({t, heads, head_dim}, 3, device), df = random_tensor({t, heads, head_dim}, 4, device);
    kc::DeviceBuffer<uint16_t> qb(static_cast<size_t>(n)), kb(static_cast<size_t>(n)), vb(static_cast<size_t>(n)),
        db(static_cast<size_t>(n));
    kc::f32_to_bf16(qf.data<float>(), qb.get(), n, hdp::Stream{});
    kc::f32_to_bf16(kf.data<float>(), kb.get(), n, hdp::Stream{});
    kc::f32_to_bf16(vf.data<float>(), vb.get(), n, hdp::Stream{});
    kc::f32_to_bf16(df.data<float>(), db.get(), n, hdp::Stream{});
    const std::vector<int32_t> cu{0, static_cast<int32_t>(t)};
    hdp::kernels::AttentionLayout layout;
    layout.tq = layout.tk = t;
    layout.n_heads = layout.n_kv_heads = heads;
    layout.head_dim = head_dim;
    layout.scale = 1.0 / std::sqrt(double(head_dim));
    layout.cu_q = layout.cu_k = cu;
    const Tensor o = Tensor::zeros({t, heads, head_dim}, DType::kF32, device), lse = Tensor::zeros({t, heads}, DType::kF32, device);
    const double fwd_s = time_median(device, reps, [&] {
      kc::flash_attention_forward(layout, qb.get(), kb.get(), vb.get(), o.data<float>(), lse.data<float>(), hdp::Stream{});
    });
    const Tensor dq = Tensor::zeros(qf.shape(), DType::kF32, device), dk = Tensor::zeros(qf.shape(), DType::kF32, device),
                 dv = Tensor::zeros(qf.shape(), DType::kF32, device);
    const double bwd_s = time_median(device, reps, [&] {
      kc::flash_attention_backward(layout, qb.get(), kb.get(), vb.get(), o.data<float>(), lse.data<float>(), db.get(),
                                   nullptr, dq.data<float>(), dk.data<float>(), dv.data<float>(), hdp::Stream{});
    });
    return std::pair{fwd_s, bwd_s};
  });
#endif

  // ---- model step ----------------------------------------------------------
  nlohmann::json rows = nlohmann::json::array();
  const int64_t n_params = [&] {
    hdp::ops::model::LlamaModel probe_shape(config, DType::kF32, Device::kCpu);
    return probe_shape.params().numel();
  }();
  // One row: `dtype` "f32" computes in f32, "bf16" is mixed precision over the same f32 parameters
  // (the same initialisation, batch and AdamW on the f32 master copy).
  const auto model_row = [&](int64_t t, const std::string& dtype) -> nlohmann::json {
    hdp::ops::model::LlamaModel model(config, DType::kF32, device, hdp::ops::model::parse_precision(dtype));
    model.init(7);
    std::vector<int32_t> doc(static_cast<size_t>(t));
    std::mt19937 rng(11);
    for (int32_t& x : doc) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(config.vocab_size));
    const hdp::ops::model::Batch batch = hdp::ops::model::pack_documents({doc}, device);
    const Tensor m = Tensor::zeros(model.params().shape(), DType::kF32, device),
                 v = Tensor::zeros(model.params().shape(), DType::kF32, device);
    int step = 0;
    double loss = 0;
    const double step_s = time_median(device, reps, [&] {
      model.zero_grad();
      loss = model.forward(batch);
      model.backward(1.0 / double(t));
      hdp::ops::adamw_step(model.params(), model.grads(), m, v, {.lr = 1e-4f, .step = ++step}, 1.0, 0.0);
    });
    const double model_flops = config.step_flops(t);
    return {{"tokens", t},
            {"dtype", dtype},
            {"params", n_params},
            {"d_model", config.d_model},
            {"layers", config.n_layers},
            {"heads", config.n_heads},
            {"kv_heads", config.n_kv_heads},
            {"ffn", config.ffn_dim},
            {"vocab", config.vocab_size},
            {"step_s", step_s},
            {"tokens_per_s", double(t) / step_s},
            {"model_tflops", model_flops / step_s / 1e12},
            {"last_loss_per_token", loss / double(t)}};
  };
  for (const int64_t t : model_tokens)
    for (const std::string& dtype : model_dtypes) rows.push_back(model_row(t, dtype));
  out["model"] = rows;
  std::cout << out.dump(2) << std::endl;
  return 0;
}
