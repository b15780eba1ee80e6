// File: trainer/training_setup.h
//
// What a job's configuration (trainer_config.h) builds, built once: the checkpoint layout of the
// model's parameters, the data source, the planner's cost model and the ranges that take no weight
// decay. The trainer calls build_setup() once per worker; benchmarks and tests call the parts.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "checkpoint/flat_layout.h"
#include "mesh/plan/cost_model.h"
#include "mesh/step/zero.h"
#include "ops/model/llama_config.h"
#include "ops/model/llama_model.h"
#include "trainer/data/piece_source.h"
#include "trainer/trainer_config.h"

namespace hdp::trainer {

struct TrainingSetup {
  checkpoint::FlatLayout layout;
  std::shared_ptr<const data::PieceSource> data;
  std::shared_ptr<const data::PieceSource> eval;  // --eval-data; null when none
  mesh::CostModel cost;
  std::vector<mesh::ZeroOptimizer::Range> no_decay;
};

// All of the below for `config` (its errors, unchanged).
TrainingSetup build_setup(const TrainerConfig& config);

// The worker's model: its parameter and gradient buffers (zeros) on config.device, in
// config.precision.
ops::model::LlamaModel make_model(const TrainerConfig& config);

// What a standby worker (elastic/worker_env.h) builds before it is given a slot, for local rank
// 0's placement: the setup (its data's index above all) and, on the CPU, the model's buffers (on
// a GPU they would belong to the slot's device, which a standby does not open before its
// handover). The trainer takes what matches its slot's placement (run_trainer) and builds the
// rest; its batch source costs nothing to build (trainer/data/permutation.h).
struct PreparedWorker {
  TrainingSetup setup;
  std::optional<ops::model::LlamaModel> model;  // on the CPU only
};
PreparedWorker prepare_worker(const TrainerConfig& config);
// The prepared model when it was built for `config`'s device and precision, else a new one.
ops::model::LlamaModel take_model(std::optional<ops::model::LlamaModel>& prepared, const TrainerConfig& config);

// The model's parameters as the checkpoint lays them out: ops/model/llama_params.h's tensors, by
// their Hugging Face names, in buffer order.
checkpoint::FlatLayout checkpoint_layout(const ops::model::LlamaConfig& model);

// The flat ranges that take no weight decay: every RMSNorm weight (a name ending in
// "norm.weight"), or none with decay_norms.
std::vector<mesh::ZeroOptimizer::Range> no_decay_ranges(const TrainerConfig& config);

// The cost model the planner uses: the file when one is named, else an estimate from the model's
// FLOPs (only the ratios of α, β and γ matter for balancing ranks of equal speed). On a CUDA device
// it carries the model's activation sizes (trainer/memory_model.h's offload_model, copies at
// kOffloadGbps) unless the file gives its own, so that the planner may offload (plans_offload).
mesh::CostModel trainer_cost_model(const TrainerConfig& config);
// PCIe 4.0 x16's practical rate each way, GB/s: the estimate's host copy bandwidth.
inline constexpr double kOffloadGbps = 25.0;
// Whether the planner may let a micro-batch hold more than C tokens by offloading activations
// (ByteScale Eq. 3; LlamaModel runs the schedule): on a CUDA device, with an offload model. On the
// CPU activations are host memory already.
bool plans_offload(const TrainerConfig& config, const mesh::CostModel& cost);

// The data of config.data, cut at config.context: a corpus directory, an indexed dataset prefix,
// synthetic documents, or a weighted blend of those (trainer/data/blend.h). InvalidArgument for a
// directory with no usable document, an unknown distribution, a malformed blend, or a vocabulary
// too small.
std::shared_ptr<const data::PieceSource> open_data(const TrainerConfig& config);
// The same for another value of the same form (`flag` names it in errors: --eval-data).
std::shared_ptr<const data::PieceSource> open_data(const TrainerConfig& config, const std::string& spec,
                                                   const std::string& flag);

// Throws InvalidArgument when a job of `world_size` ranks cannot run this configuration: a
// sequence of `context` tokens that the ranks cannot hold (the planner's own limit under `cost`),
// or a rank that does not fit the memory limit.
void check_world(const TrainerConfig& config, const mesh::CostModel& cost, int world_size);

}  // namespace hdp::trainer
