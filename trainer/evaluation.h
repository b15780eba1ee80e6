// File: trainer/evaluation.h
//
// The loss of the held-out batch (--eval-data, TrainerConfig::eval_every) across a generation:
// every rank, the same batch (built once, the first eval_tokens tokens of the eval data in the
// seed's order, each piece cut to the context), planned for the generation's world like a step
// and run forward only (mesh::DistributedStep::evaluate).
#pragma once

#include <functional>
#include <optional>

#include "elastic/elastic_context.h"
#include "mesh/comm/communicator.h"
#include "mesh/plan/planned_step.h"
#include "mesh/step/zero.h"
#include "ops/model/llama_model.h"
#include "trainer/data/batch_source.h"
#include "trainer/step_reporter.h"
#include "trainer/trainer_config.h"
#include "trainer/training_setup.h"

namespace hdp::trainer {

class HeldOutEvaluation {
 public:
  // Plans a batch for the generation it is given.
  using Planner = std::function<mesh::PlannedStep(const data::GlobalBatch&, const elastic::Membership&)>;

  HeldOutEvaluation(const TrainingSetup& setup, const TrainerConfig& config, Planner planner)
      : setup_(setup), config_(config), planner_(std::move(planner)) {}

  // Whether the step just completed evaluates (every eval_every steps and at the last).
  bool due(std::int64_t step) const;
  // Collective over the generation's ranks.
  EvalFigures run(const elastic::Membership& m, mesh::Communicator& comm, ops::model::LlamaModel& model,
                  mesh::ZeroOptimizer& optimizer);

 private:
  const TrainingSetup& setup_;
  const TrainerConfig& config_;
  Planner planner_;
  std::optional<data::GlobalBatch> batch_;  // the held-out batch, once built
};

}  // namespace hdp::trainer
