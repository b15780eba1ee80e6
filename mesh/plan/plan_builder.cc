#include "mesh/plan/plan_builder.h"

#include <algorithm>

#include "common/error.h"

namespace hdp::mesh {

PlanBuilder::PlanBuilder(const PlanRequest& request, Strategy strategy)
    : request_(request), finish_ms_(request.speeds.size(), 0.0), next_slot_(request.speeds.size(), 0) {
  plan_.strategy = strategy;
  plan_.rank_queues.resize(request.speeds.size());
}

std::uint32_t PlanBuilder::place(std::vector<std::uint32_t> sequences, std::vector<std::uint32_t> ranks,
                                 double cost_ms, double offload_ratio, std::int64_t rank_capacity) {
  HDP_CHECK(!ranks.empty() && !sequences.empty(), "a micro-batch needs ranks and sequences");
  std::uint32_t slot = 0;
  double start = 0;
  double slowest = request_.speeds[ranks.front()];
  for (std::uint32_t r : ranks) {
    slot = std::max(slot, next_slot_[r]);
    start = std::max(start, finish_ms_[r]);
    slowest = std::min(slowest, request_.speeds[r]);
  }
  const double duration = cost_ms / slowest;
  const auto index = static_cast<std::uint32_t>(plan_.micro_batches.size());
  for (std::uint32_t r : ranks) {
    next_slot_[r] = slot + 1;
    weighted_load_ms_ += request_.speeds[r] * (start + duration - finish_ms_[r]);
    finish_ms_[r] = start + duration;
    makespan_ms_ = std::max(makespan_ms_, start + duration);
    plan_.rank_queues[r].push_back(index);
  }
  plan_.micro_batches.push_back(MicroBatch{.slot = slot,
                                           .sequences = std::move(sequences),
                                           .ranks = std::move(ranks),
                                           .offload_ratio = offload_ratio,
                                           .rank_capacity = rank_capacity,
                                           .start_ms = start,
                                           .duration_ms = duration});
  return index;
}

void PlanBuilder::extend(std::uint32_t index, std::uint32_t rank, std::uint32_t sequence, double cost_ms) {
  MicroBatch& batch = plan_.micro_batches[index];
  const double extra = cost_ms / request_.speeds[rank];
  if (batch.ranks.size() == 1) {
    HDP_CHECK(batch.ranks.front() == rank, "a local micro-batch grows only on its own rank");
    batch.sequences.push_back(sequence);
    batch.duration_ms += extra;
  } else {
    batch.local.push_back({rank, sequence});
  }
  const auto& queue = plan_.rank_queues[rank];
  auto later = std::find(queue.begin(), queue.end(), index);
  HDP_CHECK(later != queue.end(), "a micro-batch missing from its rank's queue");
  for (++later; later != queue.end(); ++later) {
    MicroBatch& next = plan_.micro_batches[*later];
    HDP_CHECK(next.ranks.size() == 1, "a ring after a micro-batch that grows would lose its start time");
    next.start_ms += extra;
  }
  finish_ms_[rank] += extra;
  weighted_load_ms_ += cost_ms;
  makespan_ms_ = std::max(makespan_ms_, finish_ms_[rank]);
}

Plan PlanBuilder::take() {
  plan_.finish_ms = finish_ms_;
  return std::move(plan_);
}

}  // namespace hdp::mesh
