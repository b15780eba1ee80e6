// File: mesh/zero.h
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
// With replicas (set_replicas, mesh/buddies.h), between 3 and 4 each rank also sends its shard's
// summed gradient to the rank that holds a copy of its state, receives the gradients of the shards
// it holds copies of, and runs the same AdamW on each copy (with a scratch copy of that shard's
// parameters, which the all-gather then overwrites with the owner's identical result): the copies
// stay bitwise equal to the originals, so that a node's loss leaves every shard's state alive.
// Cost per step: one shard's gradient sent and received per copy, one more AdamW per copy; memory:
// exp_avg, exp_avg_sq and a gradient buffer per copy.
// The gradients must already be normalised: the model's backward(1 / global token count) makes the
// summed buffer the gradient of the global batch's mean token loss, however many micro-batches and
// tokens each rank ran.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "mesh/buddies.h"
#include "mesh/communicator.h"
#include "ops/adamw.h"
#include "ops/tensor.h"

namespace hdp::mesh {

// Element counts of the W shards of an N-element buffer.
std::vector<std::int64_t> shard_counts(std::int64_t n, int world_size);

// The point-to-point tag of a replica's gradient: above every ring-attention tag (< 2^54,
// mesh/ring_attention.cc), below the communicator's own (kMaxTag).
inline constexpr Tag kReplicaGradTag = Tag{1} << 55;

class ZeroOptimizer {
 public:
  // The shard of `rank` in a buffer of `n` elements over `world_size` ranks; state zeroed.
  ZeroOptimizer(std::int64_t n, int rank, int world_size, ops::DType dtype = ops::DType::kF32,
                ops::Device device = ops::Device::kCpu);

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
              double max_grad_norm, std::chrono::milliseconds timeout = std::chrono::milliseconds::zero());

 private:
  std::int64_t n_;
  int rank_;
  std::vector<std::int64_t> counts_;
  std::int64_t offset_ = 0;
  ops::Tensor m_, v_, grad_;
  std::int64_t steps_ = 0;
  std::vector<Range> no_decay_;  // sorted by begin, merged, clipped to this shard
  std::vector<Range> all_no_decay_;  // sorted by begin, merged, over the whole buffer (for copies)

  struct Replica {
    int owner = -1;
    std::int64_t offset = 0;
    ops::Tensor m, v, grad, scratch;
  };
  const Replica& replica(int owner) const;
  int holder_ = -1;  // the rank holding the copy of this shard; -1: none
  std::vector<int> replica_owners_;
  std::vector<Replica> replicas_;
  ops::DType dtype_;
  ops::Device device_;
};

}  // namespace hdp::mesh
