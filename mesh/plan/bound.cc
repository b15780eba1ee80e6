#include "mesh/plan/bound.h"

#include <algorithm>
#include <functional>
#include <numeric>

#include "mesh/plan/sharding.h"

namespace hdp::mesh {

LowerBound lower_bound(const PlanRequest& request) {
  const CostModel& model = request.cost;
  double compute = 0;
  std::int64_t tokens = 0;
  std::int64_t longest = 0;
  std::int64_t largest_capacity = request.capacity;
  for (std::int64_t s : request.lengths) {
    if (s == 0) continue;
    compute += model.sequence_ms(s);
    tokens += s;
    longest = std::max(longest, s);
  }
  // Offload lets a rank hold more of a long sequence, so γ is counted against the largest capacity.
  const ShardLimit longest_limit = shard_limit(model, longest, request.capacity, request.offload);
  largest_capacity = std::max(largest_capacity, longest_limit.rank_capacity);
  const double micro_batches = static_cast<double>((tokens + largest_capacity - 1) / largest_capacity);
  const double total_speed = std::accumulate(request.speeds.begin(), request.speeds.end(), 0.0);

  LowerBound bound;
  bound.work_ms = (compute + model.gamma_ms * micro_batches) / total_speed;
  std::vector<double> speeds = request.speeds;
  std::sort(speeds.begin(), speeds.end(), std::greater<>());
  bound.sequence_ms = model.ring_ms(longest, longest_limit.min_ranks) / speeds[longest_limit.min_ranks - 1];
  for (auto d = longest_limit.min_ranks + 1; d <= static_cast<std::int64_t>(speeds.size()); ++d) {
    bound.sequence_ms = std::min(bound.sequence_ms, model.ring_ms(longest, d) / speeds[d - 1]);
  }
  return bound;
}

}  // namespace hdp::mesh
