#include "trainer/training_setup.h"

#include "common/error.h"
#include "common/log.h"
#include "mesh/plan/cost_model_json.h"
#include "trainer/memory_model.h"
#include "mesh/plan/plan.h"
#include "ops/model/llama_params.h"
#include "trainer/data/blend.h"
#include "trainer/data/corpus.h"
#include "trainer/data/indexed_dataset.h"
#include "trainer/data/synthetic.h"

namespace hdp::trainer {
TrainingSetup build_setup(const TrainerConfig& config) {
  return {.layout = checkpoint_layout(config.model),
          .data = open_data(config),
          .eval = config.eval_data.empty() ? nullptr : open_data(config, config.eval_data, "--eval-data"),
          .cost = trainer_cost_model(config),
          .no_decay = no_decay_ranges(config)};
}

ops::model::LlamaModel make_model(const TrainerConfig& config) {
  return ops::model::LlamaModel(config.model, ops::DType::kF32, config.device, config.precision);
}

PreparedWorker prepare_worker(const TrainerConfig& config) {
  PreparedWorker prepared{.setup = build_setup(config), .model = std::nullopt};
  if (config.device == ops::Device::kCpu) prepared.model.emplace(make_model(config));
  return prepared;
}

ops::model::LlamaModel take_model(std::optional<ops::model::LlamaModel>& prepared, const TrainerConfig& config) {
  if (prepared && config.device == ops::Device::kCpu && prepared->params().device() == ops::Device::kCpu &&
      prepared->precision() == config.precision) {
    ops::model::LlamaModel model = std::move(*prepared);
    prepared.reset();
    return model;
  }
  prepared.reset();
  return make_model(config);
}

checkpoint::FlatLayout checkpoint_layout(const ops::model::LlamaConfig& model) {
  std::vector<checkpoint::TensorSpec> tensors;
  for (const ops::model::ParamEntry& p : ops::model::param_layout(model)) tensors.push_back({p.name, p.shape});
  return checkpoint::FlatLayout(std::move(tensors));
}

std::vector<mesh::ZeroOptimizer::Range> no_decay_ranges(const TrainerConfig& config) {
  std::vector<mesh::ZeroOptimizer::Range> ranges;
  if (config.decay_norms) return ranges;
  for (const ops::model::ParamEntry& p : ops::model::param_layout(config.model)) {
    if (!p.name.ends_with("norm.weight") && !p.name.ends_with(".bias")) continue;
    std::int64_t n = 1;
    for (auto d : p.shape) n *= d;
    ranges.push_back({p.offset, p.offset + n});
  }
  return ranges;
}

void check_world(const TrainerConfig& config, const mesh::CostModel& cost, int world_size) {
  check_rank_memory(config, world_size);
  // The planner's own limit on the longest sequence a job of this size can hold.
  mesh::PlanRequest request;
  request.lengths = {config.context};
  request.speeds.assign(static_cast<std::size_t>(world_size), 1.0);
  request.capacity = config.capacity;
  request.context = config.context;
  request.cost = cost;
  request.offload = plans_offload(config, cost);
  try {
    mesh::validate_request(request);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument("--context " + std::to_string(config.context) + " does not fit " +
                          std::to_string(world_size) + " rank(s) of --capacity " + std::to_string(config.capacity) +
                          ": " + e.what());
  }
}

bool plans_offload(const TrainerConfig& config, const mesh::CostModel& cost) {
  return config.device == ops::Device::kCuda && cost.offload.has_value();
}

namespace {

// The estimate from the model's FLOPs: forward + backward is three times the forward's; a CPU
// core does a few GFLOP/s of f32 GEMM, a GPU a few hundred TFLOP/s of bf16 (calibrate: `hdp plan
// --calibrate`). Causal attention: 2·d·s² multiply-adds per layer, halved by the mask.
mesh::CostModel estimated_cost(const TrainerConfig& config) {
  const double kFlopsPerMs = config.device == ops::Device::kCuda ? 3e11 : 5e6;
  const auto& m = config.model;
  mesh::CostModel cost;
  cost.name = "estimated";
  cost.beta_ms = 3.0 * static_cast<double>(m.weight_flops_per_token()) / kFlopsPerMs;
  cost.alpha_ms = 3.0 * 2.0 * m.d_model * m.n_layers / kFlopsPerMs;
  cost.gamma_ms = 0.5;
  cost.ring_bytes_per_token = 3.0 * m.n_layers * 2.0 * m.n_kv_heads * m.head_dim() * sizeof(float);
  cost.link_gbps = 1.0;  // TCP over loopback or a LAN
  return cost;
}

}  // namespace

mesh::CostModel trainer_cost_model(const TrainerConfig& config) {
  mesh::CostModel cost = config.cost_model.empty() ? estimated_cost(config) : mesh::load_cost_model(config.cost_model);
  if (config.device == ops::Device::kCuda && !cost.offload) {
    cost.offload = offload_model(config.model, config.precision, kOffloadGbps, kOffloadGbps);
  }
  return cost;
}

namespace {

// One dataset of --data (the whole value, or one path of a blend): synthetic documents, an indexed
// dataset prefix, or a directory of text files.
std::shared_ptr<const data::PieceSource> open_dataset(const TrainerConfig& config, const std::string& spec) {
  constexpr std::string_view kSynthetic = "synthetic:";
  if (spec.rfind(kSynthetic, 0) == 0) {
    data::SyntheticOptions options;
    options.distribution = spec.substr(kSynthetic.size());
    options.seed = config.seed;
    options.context = config.context;
    options.vocab = config.model.vocab_size;
    return std::make_shared<data::SyntheticDocuments>(options);
  }
  if (data::IndexedDataset::exists(spec)) {
    auto dataset = std::make_shared<data::IndexedDataset>(spec, config.context, config.model.vocab_size);
    log()->info("data: indexed dataset {}: {} documents, {} sequences, {} tokens, {} pieces of at most {} tokens",
                spec, dataset->document_count(), dataset->sequence_count(), dataset->token_count(),
                dataset->piece_count(), config.context);
    return dataset;
  }
  data::CorpusOptions options;
  options.context = config.context;
  options.index_cache_dir = config.data_index_dir;
  auto corpus = std::make_shared<data::Corpus>(spec, options);
  const auto& s = corpus->stats();
  log()->info("data: {} documents, {} pieces of at most {} tokens, {} bytes under {}", s.documents, s.pieces,
              config.context, s.bytes, corpus->root().string());
  return corpus;
}

}  // namespace

std::shared_ptr<const data::PieceSource> open_data(const TrainerConfig& config) {
  return open_data(config, config.data, "--data");
}

std::shared_ptr<const data::PieceSource> open_data(const TrainerConfig& config, const std::string& spec,
                                                   const std::string& flag) {
  if (!data::is_blend_spec(spec)) return open_dataset(config, spec);
  const auto items = data::parse_blend_spec(spec);
  std::vector<data::BlendMember> members;
  for (std::size_t i = 0; i < items.size(); ++i) {
    const auto& [weight, path] = items[i];
    try {
      members.push_back({.weight = weight, .source = open_dataset(config, path), .label = path});
    } catch (const InvalidArgument& e) {
      // The member's own message names the path; say which item of the blend it is.
      throw InvalidArgument(flag + ": path '" + path + "' (item " + std::to_string(2 * i + 2) + "): " + e.what());
    }
  }
  auto blend = std::make_shared<data::BlendedPieces>(std::move(members), config.seed);
  for (std::size_t d = 0; d < blend->member_count(); ++d) {
    const auto pieces = blend->member(d).source->piece_count();
    log()->info("data: blend {}/{}: weight {} ({:.4f}), {}: {} pieces, {} virtual pieces an epoch (x{:.3g})", d + 1,
                blend->member_count(), blend->member(d).weight, blend->weight(d), blend->member(d).label, pieces,
                blend->member_pieces(d), static_cast<double>(blend->member_pieces(d)) / static_cast<double>(pieces));
  }
  log()->info("data: blend of {} datasets: {} virtual pieces an epoch", blend->member_count(), blend->piece_count());
  return blend;
}

}  // namespace hdp::trainer
