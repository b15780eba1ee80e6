// File: mesh/step/zero.h
//
// ZeRO-1 over all ranks of a generation: every rank holds the full parameters and computes
// gradients for its own micro-batches into a full flat gradient buffer (ops/model/llama_params.h's
// layout); the optimizer state is sharded.
//
// One step():
//   1. reduce-scatter the gradient buffer (sum) so rank r holds the summed gradient of its shard,
//      the flat range [offset(r), offset(r) + count(r)) (shard_counts: as even as possible, the
//      first N mod W ranks one element more; counts may be zero when W > N);
//   2. the global gradient norm: each rank's sum of squares over its shard (in double), all-reduced;
//   3. AdamW (ops/adamw.h) on the shard's parameters with the shard's exp_avg and exp_avg_sq only,
//      clipped by the global norm; the flat ranges given to set_no_decay (norm weights, in most
//      LLaMA recipes) are updated with weight decay 0 (AdamW is element-wise, so running it per
//      segment of the shard changes nothing else);
//   4. all-gather the updated shards into every rank's full parameter buffer.
// With replicas (set_replicas, mesh/step/buddies.h), between 3 and 4 each rank also sends its shard's
// summed gradient to the rank that holds a copy of its state, receives the gradients of the shards
// it holds copies of, and runs the same AdamW on each copy (on a copy of that shard's parameters,
// kept: the all-gather also brings the owner's identical result into the full buffer): the copies
// stay bitwise equal to the originals, so that a node's loss leaves every shard's state alive.
// Cost per step: one shard's gradient sent and received per copy, one more AdamW per copy; memory:
// exp_avg, exp_avg_sq, a gradient buffer and the copy's parameters per copy.
//
// Versions (for recovery without lost steps, mesh/step/reshard.h): every shard this rank keeps, its own
// and each copy, is a (parameters, exp_avg, exp_avg_sq) triple with the step it is at. A step's
// update changes them in place, one shard at a time, so a failure in the middle of step() leaves
// some at step S and some at S + 1. With set_keep_previous(true), each update first copies the
// triple it is about to change (a memcpy per shard and step), so that every shard stays available
// at S until the next update: survivors can then agree on one step for all shards and roll back
// or forward to it (versions()).
// Wire dtype bf16 (mixed precision, ops/model/llama_model.h's Precision::kBF16): the reduce-scatter
// carries the gradients rounded to bf16 (summed in f32 and rounded at each hop, as NCCL does) and the
// all-gather the updated parameters rounded to bf16, half of f32's bytes each; parameters, moments
// and the shard's gradient stay f32. A rank's full parameter buffer then holds its own range exactly
// (the master copy: what checkpoints, copies and reshards take) and every other range rounded to
// bf16, which is all the model's bf16 compute copy needs. The copies keep their own parameters step
// to step (they never read the full buffer).
// The gradients must already be normalised: the model's backward(1 / global token count) makes the
// summed buffer the gradient of the global batch's mean token loss, however many micro-batches and
// tokens each rank ran.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "mesh/step/buddies.h"
#include "mesh/comm/communicator.h"
#include "ops/adamw.h"
#include "ops/tensor.h"

namespace hdp::mesh {

// Element counts of the W shards of an N-element buffer.
std::vector<std::int64_t> shard_counts(std::int64_t n, int world_size);

// The point-to-point tag of a replica's gradient: above every ring-attention tag (< 2^54,
// mesh/step/ring_attention.cc), below the communicator's own (kMaxTag). The placement of the copies
// (mesh/step/replicas.h) uses the three tags after it; resharding (mesh/step/reshard.h) uses tags from
// kReshardTag on.
inline constexpr Tag kReplicaGradTag = Tag{1} << 55;
inline constexpr Tag kReshardTag = kReplicaGradTag + (Tag{1} << 40);

// Where a step is (a fault-injection hook, tests and benchmarks): called before the forward pass,
// before the reduce-scatter, after this rank's own update (before the copies'), and before the
// all-gather.
enum class StepPhase { kForward, kReduceScatter, kOptimizer, kAllGather };
const char* phase_name(StepPhase phase);
using PhaseHook = std::function<void(StepPhase)>;

class ZeroOptimizer {
 public:
  // The shard of `rank` in a buffer of `n` elements over `world_size` ranks; state zeroed.
  // `wire`: f32 (or dtype), or bf16 with dtype f32 (InvalidArgument otherwise).
  ZeroOptimizer(std::int64_t n, int rank, int world_size, ops::DType dtype = ops::DType::kF32,
                ops::Device device = ops::Device::kCpu, ops::DType wire = ops::DType::kF32);
  ops::DType wire_dtype() const { return wire_; }

  std::int64_t offset() const { return offset_; }
  std::int64_t count() const { return counts_[static_cast<std::size_t>(rank_)]; }
  const std::vector<std::int64_t>& counts() const { return counts_; }
  // This shard's optimizer state (count() elements each).
  const ops::Tensor& exp_avg() const { return m_; }
  const ops::Tensor& exp_avg_sq() const { return v_; }
  // The summed gradient of this shard after the last step() (before clipping).
  const ops::Tensor& grad_shard() const { return grad_; }
  std::int64_t steps_taken() const { return steps_; }

  // A half-open range [begin, end) of the flat buffer.
  struct Range {
    std::int64_t begin = 0;
    std::int64_t end = 0;
  };
  // Ranges of the flat buffer that take no weight decay (any order; may overlap). InvalidArgument
  // for a range outside [0, n) or with end < begin.
  void set_no_decay(std::vector<Range> ranges);

  // Restoring a shard from a checkpoint: exp_avg() and exp_avg_sq() are written in place by the
  // caller, and the step count is set here (the bias correction's t continues from it).
  void set_steps_taken(std::int64_t steps);

  // Redundancy (see above): this rank keeps copies of the states of plan.held[rank] and sends its
  // gradient shard to plan.holder[rank]. Every rank of the communicator must be given the same
  // plan, and the same before every step. The copies start zeroed, like a fresh state; a restore
  // writes them in place like its own shard. A plan for another world size: InvalidArgument.
  void set_replicas(const BuddyPlan& plan);
  const std::vector<int>& replica_owners() const { return replica_owners_; }
  // The copy of `owner`'s shard (counts()[owner] elements each); InvalidArgument when not held.
  const ops::Tensor& replica_exp_avg(int owner) const;
  const ops::Tensor& replica_exp_avg_sq(int owner) const;

  // Before every update, keep the previous triple of the shard it changes (see Versions above).
  void set_keep_previous(bool keep) { keep_previous_ = keep; }

  // A shard's state at one step, as this rank holds it: views of its buffers (valid until the
  // next step() or set_replicas()). `owner` is the shard's rank in this optimizer's world.
  struct Version {
    int owner = -1;
    std::int64_t step = 0;
    ops::Tensor params, exp_avg, exp_avg_sq;
  };
  // Every (shard, step) this rank can provide: its own shard and each copy, at their current step
  // and, with keep_previous, the step before the last update. `params` is the full flat parameter
  // buffer of the step in flight (the own shard's parameters are its range of it).
  std::vector<Version> versions(const ops::Tensor& params) const;
  // The step of this rank's own shard: steps_taken(), or steps_taken() + 1 from its update in a
  // step() until that step() returns or fails.
  std::int64_t own_step() const { return own_step_; }
  // The global gradient norm of the last step() that got as far as computing it.
  double last_grad_norm() const { return grad_norm_; }
  // Sets the copy of `owner`'s shard's parameters (after a placement: the copy's exp_avg and
  // exp_avg_sq are written in place by the caller, its parameters are given here) and its step.
  void set_replica_state(int owner, const ops::Tensor& params, std::int64_t step);

  struct Result {
    double grad_norm = 0;      // global, before clipping
    double reduce_ms = 0;      // reduce-scatter
    double update_ms = 0;      // norm all-reduce + AdamW
    double gather_ms = 0;      // all-gather
    double replica_ms = 0;     // gradients to and from the copies' holders, AdamW on the copies
  };
  // Steps 1-4 above; `params.step` is replaced by steps_taken() + 1. `params` and `grads` are the
  // full flat buffers (n elements, the dtype given at construction).
  Result step(const ops::Tensor& params, const ops::Tensor& grads, Communicator& comm, ops::AdamWParams adamw,
              double max_grad_norm, std::chrono::milliseconds timeout = std::chrono::milliseconds::zero(),
              const PhaseHook& on_phase = {});

 private:
  std::int64_t n_;
  int rank_;
  std::vector<std::int64_t> counts_;
  std::int64_t offset_ = 0;
  ops::Tensor m_, v_, grad_;
  std::int64_t steps_ = 0;
  std::vector<Range> no_decay_;  // sorted by begin, merged, clipped to this shard
  std::vector<Range> all_no_decay_;  // sorted by begin, merged, over the whole buffer (for copies)

  // A previous triple (keep_previous): step < 0 when none.
  struct Previous {
    std::int64_t step = -1;
    ops::Tensor params, m, v;
  };
  // Copies (params, m, v) into `prev` as step `step`, allocating it on first use.
  void keep(Previous& prev, const ops::Tensor& params, const ops::Tensor& m, const ops::Tensor& v, std::int64_t step) const;

  struct Replica {
    int owner = -1;
    std::int64_t offset = 0;
    std::int64_t step = 0;    // of m, v and params
    ops::Tensor m, v, grad;
    ops::Tensor params;       // the owner's range of the parameters at `step`
    Previous prev;
  };
  const Replica& replica(int owner) const;
  Replica& replica(int owner);
  int holder_ = -1;  // the rank holding the copy of this shard; -1: none
  std::vector<int> replica_owners_;
  std::vector<Replica> replicas_;
  ops::DType dtype_;
  ops::Device device_;
  ops::DType wire_;
  ops::Tensor wire_buffer_;  // bf16 wire: the n-element buffer both collectives run on
  bool keep_previous_ = false;
  std::int64_t own_step_ = 0;
  double grad_norm_ = 0;
  Previous own_prev_;
};

}  // namespace hdp::mesh
