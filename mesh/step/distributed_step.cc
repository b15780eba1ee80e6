#include "mesh/step/distributed_step.h"

#include <algorithm>
#include <string>
#include <thread>

#include "common/clock.h"
#include "common/error.h"
#include "mesh/step/batch_builder.h"
#include "mesh/plan/plan_check.h"
#include "mesh/step/ring_attention.h"

namespace hdp::mesh {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

void validate_step_plan(const Plan& plan, std::span<const std::vector<std::int32_t>> batch, int world_size) {
  if (plan.rank_queues.size() != static_cast<std::size_t>(world_size)) {
    throw InvalidArgument("distributed step: the plan is for " + std::to_string(plan.rank_queues.size()) +
                          " ranks, the communicator has " + std::to_string(world_size));
  }
  PlanRequest request;
  request.speeds.assign(static_cast<std::size_t>(world_size), 1.0);
  std::int64_t tokens = 0;
  for (const auto& s : batch) {
    request.lengths.push_back(static_cast<std::int64_t>(s.size()));
    tokens += static_cast<std::int64_t>(s.size());
  }
  if (tokens == 0) throw InvalidArgument("distributed step: the batch has no tokens");
  request.capacity = 1;
  for (std::size_t b = 0; b < plan.micro_batches.size(); ++b) {
    const MicroBatch& mb = plan.micro_batches[b];
    for (std::size_t i = 0; i < mb.ranks.size(); ++i) {
      if (mb.ranks[i] >= static_cast<std::uint32_t>(world_size)) {
        throw InvalidArgument("distributed step: micro-batch " + std::to_string(b) + " names rank " +
                              std::to_string(mb.ranks[i]) + " of a world of " + std::to_string(world_size));
      }
      if (std::find(mb.ranks.begin(), mb.ranks.begin() + static_cast<std::ptrdiff_t>(i), mb.ranks[i]) !=
          mb.ranks.begin() + static_cast<std::ptrdiff_t>(i)) {
        throw InvalidArgument("distributed step: the ring of micro-batch " + std::to_string(b) + " names rank " +
                              std::to_string(mb.ranks[i]) + " twice");
      }
    }
    request.capacity = std::max(request.capacity, mb.rank_capacity);
  }
  try {
    verify_plan(request, plan);
  } catch (const InvariantViolation& e) {
    throw InvalidArgument(std::string("distributed step: the plan does not fit this batch: ") + e.what());
  }
}

DistributedStep::DistributedStep(ops::model::LlamaModel& model, ZeroOptimizer& optimizer, Communicator& comm,
                                 StepOptions options)
    : model_(model), optimizer_(optimizer), comm_(comm), options_(options) {}

void check_planned_step(const PlannedStep& planned, std::span<const std::vector<std::int32_t>> batch, int world_size) {
  const auto world = static_cast<std::size_t>(world_size);
  if (planned.request.speeds.size() != world || planned.plan.rank_queues.size() != world) {
    throw InvalidArgument("distributed step: the plan is for " + std::to_string(planned.plan.rank_queues.size()) +
                          " ranks, the communicator has " + std::to_string(world));
  }
  if (batch.size() != planned.request.lengths.size()) {
    throw InvalidArgument("distributed step: the plan is for a batch of " +
                          std::to_string(planned.request.lengths.size()) + " sequences, the batch has " +
                          std::to_string(batch.size()));
  }
  for (std::size_t i = 0; i < batch.size(); ++i) {
    if (static_cast<std::int64_t>(batch[i].size()) != planned.request.lengths[i]) {
      throw InvalidArgument("distributed step: sequence " + std::to_string(i) + " has " +
                            std::to_string(batch[i].size()) + " tokens, the plan was made for " +
                            std::to_string(planned.request.lengths[i]));
    }
  }
}

void DistributedStep::offload_as_planned(const Plan& plan, std::uint32_t index) {
  // The planner let this micro-batch hold more than C tokens by offloading (ByteScale Eq. 3).
  if (const double ratio = plan.micro_batches[index].offload_ratio; ratio > 0) {
    model_.offload_next(ops::model::offload_schedule(ratio, model_.config().n_layers));
  }
}

StepResult DistributedStep::run(const PlannedStep& planned, std::span<const std::vector<std::int32_t>> batch) {
  check_planned_step(planned, batch, comm_.size());
  return run_checked(planned.plan, batch);
}

DistributedStep::Evaluation DistributedStep::evaluate(const PlannedStep& planned,
                                                      std::span<const std::vector<std::int32_t>> batch) {
  check_planned_step(planned, batch, comm_.size());
  const auto rank = static_cast<std::uint32_t>(comm_.rank());
  Evaluation result;
  result.loss_tokens = global_targets(batch);
  double local_loss = 0;
  for (std::uint32_t index : planned.plan.rank_queues[rank]) {
    RankMicroBatch mb = build_rank_micro_batch(planned.plan, index, rank, batch, model_.params().device());
    offload_as_planned(planned.plan, index);
    if (mb.sharded()) {
      RingAttention ring(comm_, mb.ring, mb.local_cu, index, options_.timeout);
      local_loss += model_.forward(mb.batch, &ring);
    } else {
      local_loss += model_.forward(mb.batch);
    }
  }
  result.loss_sum = comm_.allreduce_sum(local_loss, options_.timeout);
  return result;
}

StepResult DistributedStep::run(const Plan& plan, std::span<const std::vector<std::int32_t>> batch) {
  validate_step_plan(plan, batch, comm_.size());
  return run_checked(plan, batch);
}

StepResult DistributedStep::run_checked(const Plan& plan, std::span<const std::vector<std::int32_t>> batch) {
  if (!(options_.slowdown >= 1 && options_.slowdown <= 1e6)) {
    throw InvalidArgument("distributed step: slowdown must be in [1, 1e6], got " + std::to_string(options_.slowdown));
  }
  const auto rank = static_cast<std::uint32_t>(comm_.rank());
  partial_ = {};
  loss_known_ = grad_known_ = false;
  StepResult& result = partial_;
  result.loss_tokens = global_targets(batch);
  for (const auto& s : batch) result.step_tokens += static_cast<std::int64_t>(s.size());
  // Every rank scales by the same global count, so the summed gradient is the mean's.
  const double dloss = result.loss_tokens > 0 ? 1.0 / static_cast<double>(result.loss_tokens) : 0.0;

  if (options_.on_phase) options_.on_phase(StepPhase::kForward);
  // A communicator that died meanwhile (a peer lost, the generation superseded) ends this rank's
  // compute at the next layer, not after its last micro-batch: the step is lost either way, and
  // the next generation starts that much sooner.
  model_.set_between_layers([this] {
    if (comm_.dead()) throw PeerLost("the communicator died while this rank computed its micro-batches");
  });
  struct ClearCheck {
    ops::model::LlamaModel& model;
    ~ClearCheck() { model.set_between_layers({}); }
  } clear_check{model_};
  model_.zero_grad();
  double local_loss = 0;
  for (std::uint32_t index : plan.rank_queues[rank]) {
    const auto start = Clock::now();
    RankMicroBatch mb = build_rank_micro_batch(plan, index, rank, batch, model_.params().device());
    MicroBatchTiming timing{.micro_batch = index, .tokens = mb.batch.tokens.numel()};
    offload_as_planned(plan, index);
    if (mb.sharded()) {
      RingAttention ring(comm_, mb.ring, mb.local_cu, index, options_.timeout);
      local_loss += model_.forward(mb.batch, &ring);
      model_.backward(dloss);
      timing.comm_wait_ms = ring.comm_wait_ms();
    } else {
      local_loss += model_.forward(mb.batch);
      model_.backward(dloss);
    }
    timing.offloaded_bytes = model_.offloaded_bytes();
    timing.compute_ms = ms_since(start) - timing.comm_wait_ms;
    if (options_.slowdown > 1) {
      const double extra_ms = timing.compute_ms * (options_.slowdown - 1);
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(extra_ms));
      timing.compute_ms += extra_ms;
    }
    result.rank_tokens += timing.tokens;
    result.compute_ms += timing.compute_ms;
    result.comm_wait_ms += timing.comm_wait_ms;
    result.offloaded_bytes += timing.offloaded_bytes;
    result.micro_batches.push_back(timing);
  }
  result.loss_sum = comm_.allreduce_sum(local_loss, options_.timeout);
  loss_known_ = true;
  // By the optimizer phase (after this rank's own update) the global norm is known.
  PhaseHook hook = [this](StepPhase phase) {
    if (phase == StepPhase::kOptimizer) {
      partial_.grad_norm = optimizer_.last_grad_norm();
      grad_known_ = true;
    }
    if (options_.on_phase) options_.on_phase(phase);
  };
  result.zero = optimizer_.step(model_.params(), model_.grads(), comm_, options_.adamw, options_.max_grad_norm,
                                options_.timeout, hook);
  result.grad_norm = result.zero.grad_norm;
  grad_known_ = true;
  return result;
}

}  // namespace hdp::mesh
