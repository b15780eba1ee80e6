// bench/ops: CPU compute throughput, each figure next to raw OpenBLAS sgemm measured in the same run.
//
//   sgemm_GFLOP/s    raw cblas_sgemm, 1024^3, OpenBLAS's own threading, measured before and after
//                    every timed iteration: the machine's GEMM rate at that moment (mean per row)
//   linear           ops::linear_forward (hdp's OpenMP-split GEMM) at 4096 tokens x 1024 -> 1024
//   attn_fwd/bwd     one causal sequence of 1K/4K/16K tokens, 4 heads x 128 dims (LLaMA's head_dim)
//   model_step       forward + backward of the 4-layer d_model 256 model on 4K tokens
//
// Counters: GFLOP/s, vs_sgemm (the median over iterations of the rate over that iteration's
// baseline), and for the model tokens/s and vs_gemm_bound = (model FLOPs / baseline rate) / step time. FLOPs: 2 per multiply-add;
// causal attention forward 4 * head_dim * heads * T(T+1)/2, backward the customary 2.5x forward
// (FlashAttention-2's accounting; our backward recomputes the scores, so it does more work than it
// is credited with).
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "common/median.h"
#include "kernels/cpu/blas.h"
#include "ops/attention.h"
#include "ops/linear.h"
#include "ops/model/llama_model.h"

namespace {

using hdp::ops::AttentionSpec;
using hdp::ops::DType;
using hdp::ops::Tensor;
using Clock = std::chrono::steady_clock;

Tensor random_f32(const hdp::ops::Shape& shape, uint32_t seed) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  uint32_t s = seed * 2654435761u + 1;
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    s = s * 1664525u + 1013904223u;
    p[i] = float(s >> 8) * (2.0f / 16777216.0f) - 1.0f;
  }
  return t;
}

// Raw sgemm GFLOP/s at 1024^3, best of 4 after a warm-up, with OpenBLAS's own thread pool (its
// best configuration); hdp's single-threaded-OpenBLAS mode is restored after.
double measure_sgemm_gflops() {
  constexpr int kN = 1024;
  static const Tensor a = random_f32({kN, kN}, 1), b = random_f32({kN, kN}, 2);
  static const Tensor c = Tensor::zeros({kN, kN}, DType::kF32);
  openblas_set_num_threads(omp_get_max_threads());
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = Clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, kN, kN, kN, 1.0f, a.data<float>(), kN, b.data<float>(), kN,
                0.0f, c.data<float>(), kN);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (i > 0) best = std::min(best, s);
  }
  hdp::kernels::cpu::use_openmp_threading_only();
  // OpenBLAS's workers spin for a while after a call (2^28 cycles by default) before they sleep;
  // a timed body started at once would share the cores with them.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  return 2.0 * kN * kN * double(kN) / best / 1e9;
}

// Times `body` per iteration, each iteration between two sgemm measurements (not timed): its
// ratio to sgemm uses the mean of the two, so the baseline follows the machine's speed as other
// work on a shared machine comes and goes. Reports GFLOP/s over all iterations, the mean baseline
// and the median of the per-iteration ratios.
template <typename F>
void run_timed(benchmark::State& state, double flops, F&& body) {
  std::vector<double> ratios;
  double total = 0, baseline_sum = 0;
  double before = measure_sgemm_gflops();
  for (auto _ : state) {
    const auto t0 = Clock::now();
    body();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    state.SetIterationTime(s);
    const double after = measure_sgemm_gflops();
    const double baseline = (before + after) / 2;
    ratios.push_back(flops / s / 1e9 / baseline);
    baseline_sum += baseline;
    total += s;
    before = after;
  }
  state.counters["GFLOP/s"] = flops * double(state.iterations()) / total / 1e9;
  state.counters["sgemm_GFLOP/s"] = baseline_sum / double(state.iterations());
  state.counters["vs_sgemm"] = hdp::median(std::move(ratios));
}

void linear(benchmark::State& state) {
  const Tensor x = random_f32({4096, 1024}, 3), w = random_f32({1024, 1024}, 4);
  run_timed(state, 2.0 * 4096 * 1024 * 1024, [&] { benchmark::DoNotOptimize(hdp::ops::linear_forward(x, w)); });
}
BENCHMARK(linear)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(9);

constexpr int kHeads = 4;
constexpr int kHeadDim = 128;

double attention_flops(int64_t t) { return hdp::ops::model::causal_attention_flops(t, kHeads, kHeadDim); }

struct AttentionInputs {
  Tensor q, k, v, dout;
  AttentionSpec spec;
  explicit AttentionInputs(int64_t t)
      : q(random_f32({t, kHeads, kHeadDim}, 5)),
        k(random_f32({t, kHeads, kHeadDim}, 6)),
        v(random_f32({t, kHeads, kHeadDim}, 7)),
        dout(random_f32({t, kHeads, kHeadDim}, 8)),
        spec(AttentionSpec::packed({0, static_cast<int32_t>(t)})) {}
};

void attn_fwd(benchmark::State& state) {
  const AttentionInputs in(state.range(0));
  run_timed(state, attention_flops(state.range(0)),
            [&] { benchmark::DoNotOptimize(hdp::ops::attention_forward(in.q, in.k, in.v, in.spec)); });
}
BENCHMARK(attn_fwd)->Arg(1024)->Arg(4096)->Arg(16384)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(5);

void attn_bwd(benchmark::State& state) {
  const AttentionInputs in(state.range(0));
  const hdp::ops::AttentionOutput fwd = hdp::ops::attention_forward(in.q, in.k, in.v, in.spec);
  Tensor dq = Tensor::zeros(in.q.shape(), DType::kF32), dk = dq.clone(), dv = dq.clone();
  run_timed(state, 2.5 * attention_flops(state.range(0)),
            [&] { hdp::ops::attention_backward(in.q, in.k, in.v, in.spec, fwd, in.dout, Tensor(), dq, dk, dv); });
}
BENCHMARK(attn_bwd)->Arg(1024)->Arg(4096)->Arg(16384)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(5);

void model_step(benchmark::State& state) {
  const hdp::ops::model::LlamaConfig config;  // the defaults: 4 layers, d_model 256, 4 heads, ffn 768
  constexpr int64_t kTokens = 4096;
  hdp::ops::model::LlamaModel model(config);
  model.init(1);
  std::vector<int32_t> doc(kTokens);
  for (int64_t i = 0; i < kTokens; ++i) doc[size_t(i)] = int32_t((i * 7 + i / 13) % 256);
  const hdp::ops::model::Batch batch = hdp::ops::model::pack_documents({doc});
  const double flops = config.step_flops(kTokens);
  run_timed(state, flops, [&] {
    model.zero_grad();
    model.forward(batch);
    model.backward(1.0 / kTokens);
  });
  const double step_s = flops / (state.counters["GFLOP/s"] * 1e9);
  state.counters["tokens/s"] = kTokens / step_s;
  // (model FLOPs / sgemm rate) / step time is the same quotient as the rate over sgemm's.
  state.counters["vs_gemm_bound"] = state.counters["vs_sgemm"];
}
BENCHMARK(model_step)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(7);

}  // namespace

BENCHMARK_MAIN();
