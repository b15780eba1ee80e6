// File: mesh/plan/plan_builder.h
//
// Internal to the planners: appends micro-batches to a Plan and keeps the simulated clock of every
// rank. A micro-batch starts when all its members are free (a ring is synchronous), runs at the speed
// of its slowest member, and takes the slot after the latest slot any member has used, so slots grow
// along every rank's queue and ring members share one slot.
#pragma once

#include <cstdint>
#include <vector>

#include "mesh/plan/plan.h"

namespace hdp::mesh {

class PlanBuilder {
 public:
  PlanBuilder(const PlanRequest& request, Strategy strategy);

  // Appends a micro-batch of `cost_ms` (at speed 1) over `ranks`; returns its index.
  std::uint32_t place(std::vector<std::uint32_t> sequences, std::vector<std::uint32_t> ranks, double cost_ms,
                      double offload_ratio, std::int64_t rank_capacity);
  // Adds a whole sequence costing `cost_ms` that `rank` runs in micro-batch `index` (a local one, or
  // a ring `rank` is a member of). Only `rank` takes longer, so the micro-batches after it on `rank`
  // start later and must be local (no ring waits on them).
  void extend(std::uint32_t index, std::uint32_t rank, std::uint32_t sequence, double cost_ms);

  double finish_ms(std::uint32_t rank) const { return finish_ms_[rank]; }
  double makespan_ms() const { return makespan_ms_; }  // the latest finish so far
  double weighted_load_ms() const { return weighted_load_ms_; }  // Σ speed · finish over the ranks
  Plan take();

 private:
  const PlanRequest& request_;
  Plan plan_;
  std::vector<double> finish_ms_;
  double makespan_ms_ = 0;
  double weighted_load_ms_ = 0;
  std::vector<std::uint32_t> next_slot_;
};

}  // namespace hdp::mesh
