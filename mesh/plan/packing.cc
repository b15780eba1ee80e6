#include <algorithm>
#include <map>

#include "mesh/plan/strategies.h"

namespace hdp::mesh {

std::vector<std::vector<std::uint32_t>> best_fit_pack(std::span<const std::int64_t> lengths,
                                                      std::span<const std::uint32_t> order, std::int64_t ring_size,
                                                      std::int64_t capacity) {
  const std::int64_t bin_tokens = ring_size * capacity;
  std::vector<std::vector<std::uint32_t>> bins;
  // room left -> bin index; equal keys keep insertion order, so the packing is deterministic.
  std::multimap<std::int64_t, std::size_t> room;
  for (std::uint32_t sequence : order) {
    const std::int64_t tokens = (lengths[sequence] + ring_size - 1) / ring_size * ring_size;
    auto best = room.lower_bound(tokens);
    std::size_t bin;
    std::int64_t left;
    if (best == room.end()) {
      bin = bins.size();
      bins.emplace_back();
      left = bin_tokens - tokens;
    } else {
      bin = best->second;
      left = best->first - tokens;
      room.erase(best);
    }
    bins[bin].push_back(sequence);
    if (left > 0) room.emplace(left, bin);
  }
  return bins;
}

std::vector<std::uint32_t> longest_first(std::span<const std::int64_t> lengths) {
  std::vector<std::uint32_t> order;
  order.reserve(lengths.size());
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    if (lengths[i] > 0) order.push_back(static_cast<std::uint32_t>(i));
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](std::uint32_t a, std::uint32_t b) { return lengths[a] > lengths[b]; });
  return order;
}

std::int64_t fastest_ring_size(const CostModel& model, std::int64_t tokens, std::int64_t min_ranks,
                               std::int64_t max_ranks) {
  std::int64_t lo = min_ranks;
  std::int64_t hi = max_ranks;
  while (hi - lo > 2) {
    const std::int64_t m1 = lo + (hi - lo) / 3;
    const std::int64_t m2 = hi - (hi - lo) / 3;
    if (model.ring_ms(tokens, m1) <= model.ring_ms(tokens, m2)) {
      hi = m2;
    } else {
      lo = m1;
    }
  }
  std::int64_t best = lo;
  for (std::int64_t d = lo + 1; d <= hi; ++d) {
    if (model.ring_ms(tokens, d) < model.ring_ms(tokens, best)) best = d;
  }
  return best;
}

std::int64_t knee_ring_size(const CostModel& model, std::int64_t tokens, std::int64_t min_ranks,
                            std::int64_t max_ranks, double slack) {
  const std::int64_t fastest = fastest_ring_size(model, tokens, min_ranks, max_ranks);
  const double good_enough = model.ring_ms(tokens, fastest) * (1 + slack);
  std::int64_t lo = min_ranks;
  std::int64_t hi = fastest;  // ring time falls monotonically on [min_ranks, fastest]
  while (lo < hi) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    if (model.ring_ms(tokens, mid) <= good_enough) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

}  // namespace hdp::mesh
