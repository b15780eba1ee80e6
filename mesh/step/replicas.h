// File: mesh/step/replicas.h
//
// The redundant optimizer shards of a generation (docs/data-plane.md, "Redundant shards"): where
// each rank's copy lives (buddies.h), the copies placed whole at the generation's start, and a
// check that every copy still equals its original. ZeroOptimizer (zero.h) keeps the copies equal
// step after step; this file starts them equal and checks them.
//
// Both calls are collectives over the generation's communicator: every rank calls them at the same
// point with its own optimizer.
//
// Example (the trainer, at a generation's start and every N steps):
//   const BuddyPlan plan = place_replicas(zero, model.params(), node_of_rank, step, comm, timeout);
//   ReplicaCheck check = verify_replicas(zero, comm);   // check.wrong lists (owner, holder) pairs
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mesh/comm/communicator.h"
#include "mesh/step/buddies.h"
#include "mesh/step/zero.h"
#include "ops/tensor.h"

namespace hdp::mesh {

// The tags of the placement's three messages per copy (exp_avg, exp_avg_sq, the owner's parameters):
// the three after kReplicaGradTag, in the range zero.h reserves for the replicas, below kReshardTag.
inline constexpr Tag kReplicaExpAvgTag = kReplicaGradTag + 1;
inline constexpr Tag kReplicaExpAvgSqTag = kReplicaGradTag + 2;
inline constexpr Tag kReplicaParamsTag = kReplicaGradTag + 3;

// The copies of a generation on their way (post_replicas): the messages are posted and travel while
// the caller goes on (the generation's first step: on a GPU over NCCL's stream, over TCP on the
// communicator's threads). Until settle() the copies are not offered (ZeroOptimizer::versions skips
// a copy without its step) and the caller must not update the optimizer: settle() before the first
// step's update, which overwrites the moments being sent. A placement that is never settled (the
// generation ended first) is dropped with the communicator's death: the messages keep their buffers
// alive (communicator.h's Work contract), and the copies were never offered.
class ReplicaPlacement {
 public:
  ReplicaPlacement() = default;
  // Posted and not settled yet.
  bool pending() const { return zero_ != nullptr; }
  // This rank's bytes on the way, sent and received.
  std::int64_t bytes() const { return bytes_; }
  const BuddyPlan& plan() const { return plan_; }
  // Waits for every message (what the communicator throws after `timeout`: PeerLost, TimeoutError),
  // then sets each held copy's parameters and step and keeps the previous triples when every shard
  // has a copy. A no-op when nothing is pending.
  void settle(Communicator::Duration timeout);

 private:
  friend ReplicaPlacement post_replicas(ZeroOptimizer&, const ops::Tensor&, const std::vector<std::string>&,
                                        std::int64_t, Communicator&);
  ZeroOptimizer* zero_ = nullptr;
  BuddyPlan plan_;
  std::int64_t step_ = 0;
  std::int64_t bytes_ = 0;
  std::vector<std::unique_ptr<Work>> work_;
  std::vector<std::pair<int, ops::Tensor>> received_;  // each held copy's owner and its parameters
};

// Plans the copies from the generation's membership (`node_of_rank`, by rank), installs the plan in
// `zero` (set_replicas) and posts the messages of place_replicas below without waiting for them.
ReplicaPlacement post_replicas(ZeroOptimizer& zero, const ops::Tensor& params,
                               const std::vector<std::string>& node_of_rank, std::int64_t step, Communicator& comm);

// Plans the copies from the generation's membership (`node_of_rank`, by rank), installs the plan
// in `zero` (set_replicas), sends every rank's moments whole to its holder and receives the copies
// this rank holds with each owner's range of its `params` (the full buffer at `step`; only the owner's
// own range is its exact master copy under bf16 mixed precision), and keeps the previous triples only when every shard has a copy (on one node a
// lost shard is lost anyway). Returns the plan. Throws what the communicator throws (PeerLost,
// TimeoutError) after `timeout`.
BuddyPlan place_replicas(ZeroOptimizer& zero, const ops::Tensor& params, const std::vector<std::string>& node_of_rank,
                         std::int64_t step, Communicator& comm, Communicator::Duration timeout);

struct ReplicaCheck {
  int checked = 0;                          // copies compared with their originals
  std::vector<std::pair<int, int>> wrong;   // (owner, holder) of every copy that differs
};

// Every rank's xxh3 checksums of its own moments and of the copies it holds, all-gathered: each
// copy must equal its original. Every rank gets the same result.
ReplicaCheck verify_replicas(const ZeroOptimizer& zero, Communicator& comm);

}  // namespace hdp::mesh
