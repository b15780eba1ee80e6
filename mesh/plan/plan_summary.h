// File: mesh/plan/plan_summary.h
//
// The figures `hdp plan` and bench/scheduler print for a plan, all derived from the plan and the
// request (simulated times in ms, the cost model's unit).
#pragma once

#include <cstdint>
#include <vector>

#include "mesh/plan/bound.h"
#include "mesh/plan/plan.h"

namespace hdp::mesh {

struct Spread {
  double min = 0;
  double mean = 0;
  double max = 0;
};

struct PlanSummary {
  double makespan_ms = 0;  // when the last rank finishes
  LowerBound bound;
  double imbalance = 0;    // makespan / bound
  std::int64_t tokens = 0;
  std::int64_t sequences = 0;          // with at least one token
  std::int64_t sharded_sequences = 0;  // run by a ring of more than one rank (static: all of them)
  Spread ranks_per_sharded;            // ring sizes of the sharded sequences (zeros when none)
  Spread micro_batches_per_rank;
  double ring_bytes = 0;               // bytes sent over all rings in the step
  std::uint64_t digest = 0;            // xxh3-64 of the plan's structure, equal iff the plans are
};

PlanSummary summarize(const PlanRequest& request, const Plan& plan);

// The cost at speed 1 (the cost model's ms) of each rank's work in the plan: every micro-batch in
// its queue as one member runs it (CostModel::micro_batch_ms over the ring's size, γ included)
// plus the whole sequences it runs beside a ring's shard. What a rank's measured compute time is
// compared with to find its speed (SpeedTracker); 0 for a rank with nothing to run.
std::vector<double> rank_work_ms(const PlanRequest& request, const Plan& plan);

// xxh3-64 over every micro-batch (slot, ring, sequences, local sequences) and every rank's queue.
std::uint64_t plan_digest(const Plan& plan);

}  // namespace hdp::mesh
