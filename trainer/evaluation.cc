#include "trainer/evaluation.h"

#include <algorithm>

#include "common/clock.h"
#include "mesh/step/distributed_step.h"

namespace hdp::trainer {

bool HeldOutEvaluation::due(std::int64_t step) const {
  return config_.eval_every > 0 && (step % config_.eval_every == 0 || step == config_.steps);
}

EvalFigures HeldOutEvaluation::run(const elastic::Membership& m, mesh::Communicator& comm,
                                   ops::model::LlamaModel& model, mesh::ZeroOptimizer& optimizer) {
  const auto started = SteadyClock::now();
  if (!batch_) {
    data::BatchSource source(setup_.eval, config_.seed);
    source.log_refusals(m.rank == 0);
    std::int64_t available = 0;
    for (std::uint64_t p = 0; p < setup_.eval->piece_count() && available < config_.eval_tokens; ++p)
      available += setup_.eval->piece_length(p);
    checkpoint::DataPosition position;
    batch_ = source.next(position, std::min(available, config_.eval_tokens));
  }
  const mesh::PlannedStep planned = planner_(*batch_, m);
  mesh::StepOptions options;
  options.timeout = config_.timeout;
  mesh::DistributedStep step(model, optimizer, comm, options);
  const mesh::DistributedStep::Evaluation result = step.evaluate(planned, batch_->sequences);
  return {.loss = result.loss(), .tokens = batch_->tokens, .ms = ms_since(started)};
}

}  // namespace hdp::trainer
