// ByteScale Algorithm 2 (DP-Balance) with Malleus-style speeds: one pass over the batch in the order
// of how long each sequence keeps one rank busy, most first (LPT order): t(s, D(s)), its ring at the
// fewest ranks, for a long sequence; γ + T(s) for a short one. So a short sequence of nearly C tokens
// (one rank for γ + T(C)) goes before a long one just above C (two ranks, each for about half), and
// the big items are placed while ranks are still free early enough to take them. `target` is the
// step's lower bound (mesh/plan/bound.h).
//
// - A long sequence (more than one rank's capacity C) becomes a ring over the ranks that are free
//   earliest. A ring spans at least D(s) ranks and grows, one earliest-free rank at a time, until it
//   would finish by the horizon (start = when its last member is free, duration = cost / slowest
//   member's speed): a sequence on the critical path is spread over more ranks, whose compute per
//   rank falls while the ring transfer grows, but never past the knee where the cost model says more
//   ranks buy less than 2% of the ring's time. The horizon is the target or, past it, the step's
//   current end (a ring that ends before the busiest rank costs the step nothing); when no size ends
//   by the horizon, see place_ring.
// - A short sequence goes whole to where it ends earliest (time = cost / speed, so a rank at half
//   speed receives half the work): a new micro-batch on the rank free earliest (γ + T(s)), or room
//   left in a micro-batch (T(s) only: a local one, or a ring member's share of its latest ring) on
//   the earliest-free rank that has room for it (mesh/plan/room_index.h). Room wins ties, and also wins
//   when it ends at most δ later (default 0). Ranks that ran rings therefore receive fewer, and ranks
//   with short sequences more, micro-batches.
//
// Algorithm 2's buckets of equal FLOPs serve PP-Balance (interleaving length levels per pipeline);
// with DP-Balance, "take from the first bucket" is the costliest-first order used here, and its
// "ranks more than δ below the maximum" always include the ranks chosen here.
#include <algorithm>
#include <limits>
#include <numeric>
#include <optional>

#include "mesh/plan/bound.h"
#include "mesh/plan/plan_builder.h"
#include "mesh/plan/rank_heap.h"
#include "mesh/plan/room_index.h"
#include "mesh/plan/sharding.h"
#include "mesh/plan/strategies.h"

namespace hdp::mesh {
namespace {

// A ring grows at most to the size whose time is within 2% of the fastest (knee_ring_size).
constexpr double kRingSlack = 0.02;
// absorb_stranded runs only when the next ring takes more than this share of the horizon.
constexpr double kLongRingShare = 0.25;

// The work the scheduler still has to place, in rank-milliseconds at speed 1: the lower bound's
// numerator (compute + γ per C tokens), decremented as sequences are placed.
struct Backlog {
  double remaining_ms = 0;
  double total_speed = 0;
};

double share_of_backlog(const CostModel& model, std::int64_t tokens, std::int64_t capacity) {
  return model.sequence_ms(tokens) + model.gamma_ms * static_cast<double>(tokens) / static_cast<double>(capacity);
}

// Ranks free when a ring starts but too few for the next long sequence would idle until short
// sequences reach them, while that sequence waits for ranks elsewhere; the ring takes them instead
// when it then still ends by the horizon (it only gets shorter). `popped` holds the ring's `size`
// ranks first; more are popped from `free_at` as needed. Returns the new size.
std::int64_t absorb_stranded(const PlanRequest& request, std::int64_t tokens, std::int64_t size, std::int64_t widest,
                             std::int64_t next_min_ranks, double horizon_ms, UpdatableRankHeap& free_at,
                             std::vector<std::pair<double, std::uint32_t>>& popped) {
  const double start_ms = popped[static_cast<std::size_t>(size) - 1].first;
  while (static_cast<std::int64_t>(popped.size()) < size + next_min_ranks && !free_at.empty() &&
         free_at.top().first <= start_ms) {
    popped.push_back(free_at.pop());
  }
  std::int64_t stranded = 0;
  double slowest = std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < popped.size(); ++i) {
    if (popped[i].first > start_ms) break;
    slowest = std::min(slowest, request.speeds[popped[i].second]);
    stranded += static_cast<std::int64_t>(i) >= size ? 1 : 0;
  }
  const std::int64_t wider = size + stranded;
  if (stranded == 0 || stranded >= next_min_ranks || wider > widest) return size;
  if (start_ms + request.cost.ring_ms(tokens, wider) / slowest > horizon_ms) return size;
  return wider;
}

// A long sequence: pops the ring's ranks from `free_at` and places the ring. `next_tokens` is the
// next long sequence in the order (0: none).
//
// A ring of k ranks ends at finish(k) = (when its k-th member is free) + cost(k) / slowest member,
// and also raises the average load: idle members waiting for the last one, and γ and transfer that
// grow with k. The step cannot end before either, so when no size ends by the horizon the ring takes
// the k minimising max(finish(k), average load after it). The average only grows with k, which
// bounds the search.
void place_ring(const PlanRequest& request, std::uint32_t sequence, std::int64_t next_tokens, double target_ms,
                Backlog& backlog, UpdatableRankHeap& free_at, PlanBuilder& builder, RoomIndex& rooms) {
  const CostModel& model = request.cost;
  const std::int64_t tokens = request.lengths[sequence];
  const ShardLimit limit = shard_limit(model, tokens, request.capacity, request.offload);
  const auto ranks = static_cast<std::int64_t>(request.speeds.size());
  const std::int64_t widest = knee_ring_size(model, tokens, limit.min_ranks, ranks, kRingSlack);
  const double own_ms = share_of_backlog(model, tokens, request.capacity);
  backlog.remaining_ms -= own_ms;
  const double base_ms = (builder.weighted_load_ms() + backlog.remaining_ms + own_ms) / backlog.total_speed;
  // A ring that ends by the target, or by the time the busiest rank ends anyway, does not lengthen
  // the step; the smallest such ring costs the least γ and transfer.
  const double horizon_ms = std::max(target_ms, builder.makespan_ms());
  std::vector<std::pair<double, std::uint32_t>> popped;
  double slowest = std::numeric_limits<double>::infinity();
  double speed_sum = 0;
  double speed_free_sum = 0;  // Σ speed · free time over the members so far
  std::int64_t size = 0;
  bool by_horizon = false;
  double best = std::numeric_limits<double>::infinity();
  for (std::int64_t k = 1; k <= widest; ++k) {
    popped.push_back(free_at.pop());  // ascending, so the k-th is the last member to become free
    const auto [free_ms, rank] = popped.back();
    slowest = std::min(slowest, request.speeds[rank]);
    speed_sum += request.speeds[rank];
    speed_free_sum += request.speeds[rank] * free_ms;
    if (k < limit.min_ranks) continue;
    const double duration = model.ring_ms(tokens, k) / slowest;
    const double finish = free_ms + duration;
    if (finish <= horizon_ms) {
      size = k;
      by_horizon = true;
      break;
    }
    const double added_ms = speed_sum * finish - speed_free_sum - own_ms;
    const double average = base_ms + added_ms / backlog.total_speed;
    if (std::max(finish, average) < best) {
      best = std::max(finish, average);
      size = k;
    }
    if (average >= best) break;
  }
  if (by_horizon && next_tokens > request.capacity) {
    // Only a next ring long enough to matter on the horizon is worth making this one wider for.
    const ShardLimit next = shard_limit(model, next_tokens, request.capacity, request.offload);
    if (model.ring_ms(next_tokens, next.min_ranks) > kLongRingShare * horizon_ms) {
      size = absorb_stranded(request, tokens, size, widest, next.min_ranks, horizon_ms, free_at, popped);
    }
  }
  for (auto i = static_cast<std::size_t>(size); i < popped.size(); ++i) free_at.push(popped[i].first, popped[i].second);
  std::vector<std::uint32_t> ring(static_cast<std::size_t>(size));
  for (std::size_t i = 0; i < ring.size(); ++i) ring[i] = popped[i].second;
  // Offload only when a shard is larger than C; a wider ring may not need it.
  const bool offloaded = limit.offload_ratio > 0 && (tokens + size - 1) / size > request.capacity;
  const std::uint32_t index =
      builder.place({sequence}, ring, model.ring_ms(tokens, size), offloaded ? limit.offload_ratio : 0.0,
                    offloaded ? limit.rank_capacity : request.capacity);
  for (std::size_t i = 0; i < ring.size(); ++i) {
    const std::uint32_t r = ring[i];
    rooms.clear(r);  // a short sequence never joins a micro-batch before this ring
    const std::int64_t held = member_tokens(tokens, size, static_cast<std::int64_t>(i));
    if (!offloaded && held < request.capacity) rooms.add(r, index, request.capacity - held);
    rooms.set_finish(r, builder.finish_ms(r));
    free_at.push(builder.finish_ms(r), r);
  }
}

// A short sequence: into a new micro-batch on the rank free earliest, or into room on the
// earliest-free rank that has room for it, whichever ends first (room also within δ after).
void place_short(const PlanRequest& request, std::uint32_t sequence, double delta_ms, Backlog& backlog,
                 UpdatableRankHeap& free_at, PlanBuilder& builder, RoomIndex& rooms) {
  const CostModel& model = request.cost;
  const std::int64_t tokens = request.lengths[sequence];
  const double cost = model.sequence_ms(tokens);
  backlog.remaining_ms -= share_of_backlog(model, tokens, request.capacity);
  const auto [free_ms, earliest] = free_at.top();
  const double opened_end_ms = free_ms + (model.gamma_ms + cost) / request.speeds[earliest];
  const std::optional<RoomIndex::Fit> fit = rooms.earliest_fit(tokens);
  std::uint32_t rank = earliest;
  if (fit && fit->finish_ms + cost / request.speeds[fit->rank] <= opened_end_ms + delta_ms) {
    rank = fit->rank;
    builder.extend(fit->micro_batch, rank, sequence, cost);
    rooms.fill(rank, fit->micro_batch, tokens);
  } else {
    free_at.pop();
    const std::uint32_t index = builder.place({sequence}, {rank}, model.gamma_ms + cost, 0.0, request.capacity);
    if (tokens < request.capacity) rooms.add(rank, index, request.capacity - tokens);
  }
  rooms.set_finish(rank, builder.finish_ms(rank));
  free_at.push(builder.finish_ms(rank), rank);
}

// The order of placement: how long each sequence keeps one rank busy, most first; ties by length,
// then by index. Among short sequences this is longest first, which RoomIndex relies on.
std::vector<std::uint32_t> costliest_first(const PlanRequest& request) {
  const CostModel& model = request.cost;
  std::vector<std::uint32_t> order;
  std::vector<double> busy_ms(request.lengths.size(), 0.0);
  for (std::size_t s = 0; s < request.lengths.size(); ++s) {
    const std::int64_t tokens = request.lengths[s];
    if (tokens == 0) continue;
    order.push_back(static_cast<std::uint32_t>(s));
    busy_ms[s] = tokens > request.capacity
                     ? model.ring_ms(tokens, shard_limit(model, tokens, request.capacity, request.offload).min_ranks)
                     : model.gamma_ms + model.sequence_ms(tokens);
  }
  // One sort on the whole key (a total order, so its result does not depend on the algorithm).
  std::sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
    if (busy_ms[a] != busy_ms[b]) return busy_ms[a] > busy_ms[b];
    if (request.lengths[a] != request.lengths[b]) return request.lengths[a] > request.lengths[b];
    return a < b;
  });
  return order;
}

}  // namespace

Plan plan_balanced(const PlanRequest& request) {
  const LowerBound bound = lower_bound(request);
  const double target_ms = bound.bound_ms();
  const double total_speed = std::accumulate(request.speeds.begin(), request.speeds.end(), 0.0);
  Backlog backlog{.remaining_ms = bound.work_ms * total_speed, .total_speed = total_speed};
  const double delta_ms = request.delta_ms.value_or(0.0);
  PlanBuilder builder(request, Strategy::kBalanced);
  UpdatableRankHeap free_at(request.speeds.size());
  RoomIndex rooms(request.speeds.size());
  const std::vector<std::uint32_t> order = costliest_first(request);
  // next_long_tokens[i]: the length of the first long sequence after order[i] (0: none).
  std::vector<std::int64_t> next_long_tokens(order.size(), 0);
  for (std::size_t i = order.size(); i-- > 1;) {
    const std::int64_t tokens = request.lengths[order[i]];
    next_long_tokens[i - 1] = tokens > request.capacity ? tokens : next_long_tokens[i];
  }
  for (std::size_t i = 0; i < order.size(); ++i) {
    const std::uint32_t sequence = order[i];
    if (request.lengths[sequence] > request.capacity) {
      place_ring(request, sequence, next_long_tokens[i], target_ms, backlog, free_at, builder, rooms);
    } else {
      place_short(request, sequence, delta_ms, backlog, free_at, builder, rooms);
    }
  }
  return builder.take();
}

}  // namespace hdp::mesh
