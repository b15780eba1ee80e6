// File: mesh/step/distributed_step.h
//
// One HDP training step of the LLaMA model on this rank, exactly as a plan (plan.h) says: the
// rank's micro-batches in its queue's order (a ring's members run their shared micro-batch in the
// same slot, with ring attention inside the model), each forward then backward into the full
// gradient buffer, scaled by 1 / (the global batch's count of predicted tokens); then ZeRO-1
// (zero.h) and AdamW. The result equals a single-process step over the whole batch up to float
// summation order (tests/mesh/step_equivalence_test.cc states the bounds).
//
// Every rank of the communicator must call run() with the same plan and the same global batch
// (token ids of every sequence): each rank builds its own rows from them, and the loss
// normalisation needs no communication (every rank can count the batch's targets).
//
// Example:
//   ZeroOptimizer zero(param_count(config), comm.rank(), comm.size());
//   DistributedStep step(model, zero, comm, {.adamw = {.lr = 3e-4f}, .max_grad_norm = 1.0});
//   StepResult r = step.run(planned, batch);  // planned: plan_step(request, ...) (planned_step.h);
//                                             // r.loss() is the global batch's mean token loss
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

#include "mesh/comm/communicator.h"
#include "mesh/plan/plan.h"
#include "mesh/plan/planned_step.h"
#include "mesh/step/zero.h"
#include "ops/model/llama_model.h"

namespace hdp::mesh {

struct StepOptions {
  ops::AdamWParams adamw;         // `step` is taken from the optimizer
  double max_grad_norm = 1.0;     // <= 0: no clipping
  std::chrono::milliseconds timeout{30000};  // every transfer and collective of the step
  // Fault injection (tests, benchmarks): >= 1; after each micro-batch the rank sleeps
  // (slowdown - 1) x its compute, counted in compute_ms, as if its device ran 1/slowdown as fast.
  double slowdown = 1;
  // Fault injection (tests, benchmarks): told where the step is (mesh/step/zero.h).
  PhaseHook on_phase;
};

struct MicroBatchTiming {
  std::uint32_t micro_batch = 0;  // index into Plan::micro_batches
  std::int64_t tokens = 0;        // rows this rank ran
  double compute_ms = 0;          // forward + backward, less the waits below
  double comm_wait_ms = 0;        // waiting for ring transfers that compute did not hide
  std::int64_t offloaded_bytes = 0;  // activations moved to host memory and back (the plan's offload_ratio)
};

struct StepResult {
  double loss_sum = 0;             // summed token loss over the global batch (all-reduced)
  std::int64_t loss_tokens = 0;    // predicted tokens of the global batch
  double loss() const { return loss_tokens > 0 ? loss_sum / static_cast<double>(loss_tokens) : 0.0; }
  std::int64_t step_tokens = 0;    // tokens of the global batch
  std::int64_t rank_tokens = 0;    // rows this rank ran
  double grad_norm = 0;            // global, before clipping
  std::vector<MicroBatchTiming> micro_batches;  // this rank's, in queue order
  double compute_ms = 0;           // sum over micro_batches
  double comm_wait_ms = 0;         // sum over micro_batches
  std::int64_t offloaded_bytes = 0;  // sum over micro_batches: this rank's offloaded activations
  ZeroOptimizer::Result zero;
};

class DistributedStep {
 public:
  // The objects must outlive this one. The model's parameters must be identical on every rank.
  DistributedStep(ops::model::LlamaModel& model, ZeroOptimizer& optimizer, Communicator& comm, StepOptions options);

  // A step planned by plan_step (planned_step.h), whose plan was verified against its request
  // there: checks only that `batch` is the request's batch (the same lengths) and that the plan is
  // for this communicator's world size (InvalidArgument naming the difference), then runs it.
  StepResult run(const PlannedStep& planned, std::span<const std::vector<std::int32_t>> batch);
  // A plan made elsewhere (a test's edited plan, a benchmark's): checks it against the batch and
  // the communicator first (validate_step_plan), then runs the step.
  StepResult run(const Plan& plan, std::span<const std::vector<std::int32_t>> batch);

  // The loss of `batch` under the current parameters, with no gradient and no update: every rank
  // runs the forward of its micro-batches as `planned` places them (ring attention included) and
  // the summed token loss is all-reduced in double. The same batch gives the same loss at any
  // world size and plan up to f32 summation order (tests/mesh/evaluate_test.cc: within 1e-6
  // relative at 1, 2 and 4 ranks). The model's gradients are left as they were.
  struct Evaluation {
    double loss_sum = 0;
    std::int64_t loss_tokens = 0;
    double loss() const { return loss_tokens > 0 ? loss_sum / static_cast<double>(loss_tokens) : 0.0; }
  };
  Evaluation evaluate(const PlannedStep& planned, std::span<const std::vector<std::int32_t>> batch);

  // What the last run() had computed when it threw (a peer lost in the middle of the step): the
  // loss once all-reduced (loss_known), the gradient norm once the optimizer had it
  // (grad_norm_known). A step that recovery rolls forward (mesh/step/reshard.h) is reported from it.
  const StepResult& partial() const { return partial_; }
  bool loss_known() const { return loss_known_; }
  bool grad_norm_known() const { return grad_known_; }

 private:
  StepResult run_checked(const Plan& plan, std::span<const std::vector<std::int32_t>> batch);
  // Micro-batch `index` of `plan` offloads the share of its activations the plan gave it.
  void offload_as_planned(const Plan& plan, std::uint32_t index);

  ops::model::LlamaModel& model_;
  ZeroOptimizer& optimizer_;
  StepResult partial_;
  bool loss_known_ = false, grad_known_ = false;
  Communicator& comm_;
  StepOptions options_;
};

// The checks of run(const Plan&, ...), on their own: the plan's world size, its rings' ranks, and
// verify_plan against a request rebuilt from the batch (speeds 1, the largest rank capacity).
void validate_step_plan(const Plan& plan, std::span<const std::vector<std::int32_t>> batch, int world_size);
// The checks of run(const PlannedStep&, ...), on their own: the world size, and the batch's
// sequence lengths against the request's.
void check_planned_step(const PlannedStep& planned, std::span<const std::vector<std::int32_t>> batch, int world_size);

}  // namespace hdp::mesh
