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

#include <string>
#include <utility>
#include <vector>

#include "mesh/comm/communicator.h"
#include "mesh/step/buddies.h"
#include "mesh/step/zero.h"
#include "ops/tensor.h"

namespace hdp::mesh {

// The tags of the placement's messages per copy (exp_avg, exp_avg_sq, and under a bf16 wire the
// owner's parameters):
// the three after kReplicaGradTag, in the range zero.h reserves for the replicas, below kReshardTag.
inline constexpr Tag kReplicaExpAvgTag = kReplicaGradTag + 1;
inline constexpr Tag kReplicaExpAvgSqTag = kReplicaGradTag + 2;
inline constexpr Tag kReplicaParamsTag = kReplicaGradTag + 3;

// Plans the copies from the generation's membership (`node_of_rank`, by rank), installs the plan
// in `zero` (set_replicas), sends every rank's moments whole to its holder and receives the copies
// this rank holds, each with its owner's range of the parameters at `step`: under a bf16 wire sent
// by the owner (only its own range of its full buffer `params` is its exact master copy), under an
// exact wire taken from this rank's own `params` (then equal on every rank: callers place copies
// at a generation's start, where every buffer is whole). Keeps the previous triples only when
// every shard has a copy (on one node a lost shard is lost anyway). Returns the plan. Throws what the communicator throws (PeerLost,
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
