#include "bench/checkpoint_stall.h"

#include <cmath>
#include <cstdio>
#include <vector>

#include "bench/checkpoint_support.h"
#include "checkpoint/async_saver.h"
#include "ops/adamw.h"
#include "ops/model/llama_model.h"
#include "ops/model/llama_params.h"

namespace hdp::bench {
namespace {

using ops::Tensor;
using ops::model::LlamaConfig;

constexpr std::int64_t kTokens = 4096;

checkpoint::FlatLayout layout_of(const LlamaConfig& config) {
  std::vector<checkpoint::TensorSpec> tensors;
  for (const ops::model::ParamEntry& p : ops::model::param_layout(config)) tensors.push_back({p.name, p.shape});
  return checkpoint::FlatLayout(std::move(tensors));
}

std::span<const float> flat(const Tensor& t) { return {t.data<float>(), static_cast<std::size_t>(t.numel())}; }

}  // namespace

void measure_stall(const std::filesystem::path& root, int saves) {
  const LlamaConfig config;  // the demo model
  ops::model::LlamaModel model(config);
  model.init(1);
  std::vector<std::int32_t> document(kTokens);
  for (std::int64_t i = 0; i < kTokens; ++i) document[static_cast<std::size_t>(i)] = static_cast<std::int32_t>((i * 7 + i / 13) % 256);
  const ops::model::Batch batch = ops::model::pack_documents({document});
  const Tensor m = Tensor::zeros(model.params().shape(), ops::DType::kF32);
  const Tensor v = Tensor::zeros(model.params().shape(), ops::DType::kF32);
  std::int64_t step = 0;
  auto train_step = [&] {
    model.zero_grad();
    model.forward(batch);
    model.backward(1.0 / kTokens);
    const double norm = std::sqrt(ops::sum_squares(model.grads()));
    ops::adamw_step(model.params(), model.grads(), m, v, {.lr = 3e-4f, .weight_decay = 0.1f, .step = ++step}, norm, 1.0);
  };

  const checkpoint::FlatLayout layout = layout_of(config);
  checkpoint::CheckpointOptions options;
  options.root = root;
  options.model_config = {{"d_model", config.d_model}, {"n_layers", config.n_layers}, {"vocab_size", config.vocab_size}};
  options.keep = 2;  // retention runs in the background writer, as in a job
  checkpoint::SoloGroup solo;
  checkpoint::AsyncSaver saver(options, layout, solo);

  train_step();  // warm-up: activations allocated and touched
  Samples step_s, stall_s, wait_s, ratio;
  double first_stall = 0;
  for (int i = 0; i < saves; ++i) {
    const double step_seconds = seconds(train_step);
    checkpoint::ShardSnapshot shard;
    shard.range = {0, layout.total()};
    shard.buffers = {flat(model.params()), flat(m), flat(v)};
    shard.step = step;
    shard.rng_state.assign(16, 1);
    checkpoint::StageTiming timing;
    const double stall = seconds([&] { timing = saver.save(shard); });
    if (i == 0) first_stall = stall;
    step_s.add(step_seconds);
    stall_s.add(stall);
    wait_s.add(timing.wait_seconds);
    ratio.add(stall / step_seconds);
  }
  check(saver.wait(), "async save");

  const double mib = 3.0 * static_cast<double>(layout.total()) * sizeof(float) / (1 << 20);
  std::printf("stall  demo model (%lld parameters, %.1f MiB per save), %lld-token step, a save after each of %d steps\n",
              static_cast<long long>(layout.total()), mib, static_cast<long long>(kTokens), saves);
  std::printf("       step (fwd+bwd+AdamW) %s s   stall per save %s s (first save %.4f s: staging first touched)"
              "   of which waiting for the previous save %s s\n",
              step_s.summary(2).c_str(), stall_s.summary(4).c_str(), first_stall, wait_s.summary(4).c_str());
  std::printf("       stall / step: median %.3f%%, max %.3f%%   (target <= 2%%)\n", 100 * ratio.median(), 100 * ratio.max());
}

}  // namespace hdp::bench
