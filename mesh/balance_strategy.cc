// ByteScale Algorithm 2 (DP-Balance) with Malleus-style speeds, in two phases over the batch sorted
// longest first. `target` is the step's lower bound (mesh/bound.h).
//
// 1. Long sequences (more than one rank's capacity C) become rings, longest first, over the ranks
//    that are free earliest. A ring spans at least D(s) ranks and grows, one earliest-free rank at a
//    time, until it would finish by the horizon (start = when its last member is free, duration =
//    cost / slowest member's speed): a sequence on the critical path is spread over more ranks,
//    whose compute per rank falls while the ring transfer grows, but never past the knee where the
//    cost model says more ranks buy less than 2% of the ring's time. The horizon is the target or,
//    past it, the step's current end (a ring that ends before the busiest rank costs the step
//    nothing); when no size ends by the horizon, see place_ring.
// 2. Short sequences go whole, longest first, to the rank free earliest (time = cost / speed, so a
//    rank at half speed receives half the work). Ranks within δ of it count as tied; among them the
//    sequence goes into the micro-batch it fills best (a local one, or the room a ring shard left on
//    the rank's last ring), and opens a new micro-batch (paying γ) on the earliest-free rank only when
//    it fits nowhere. Ranks that ran rings therefore receive fewer, and ranks with short sequences
//    more, micro-batches; similar lengths run at similar times.
//
// Algorithm 2's buckets of equal FLOPs serve PP-Balance (interleaving length levels per pipeline);
// with DP-Balance, "take from the first bucket" is the longest-first order used here, and its "ranks
// more than δ below the maximum" always include the earliest-free rank chosen here.
#include <algorithm>
#include <limits>
#include <numeric>

#include "mesh/bound.h"
#include "mesh/plan_builder.h"
#include "mesh/rank_heap.h"
#include "mesh/sharding.h"
#include "mesh/strategies.h"

namespace hdp::mesh {
namespace {

// How many tied ranks a short sequence looks at; bounds the scheduler's time per sequence.
constexpr std::size_t kMaxTiedRanks = 16;
// A ring grows at most to the size whose time is within 2% of the fastest (knee_ring_size).
constexpr double kRingSlack = 0.02;
// absorb_stranded runs only when the next ring takes more than this share of the horizon.
constexpr double kLongRingShare = 0.25;

struct Room {
  std::uint32_t micro_batch = 0;
  std::int64_t tokens = 0;  // free tokens left in it
};

// The work the scheduler still has to place, in rank-milliseconds at speed 1: the lower bound's
// numerator (compute + γ per C tokens), decremented as long sequences are placed (only phase 1
// reads it, and every long sequence comes before every short one).
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
                             std::int64_t next_min_ranks, double horizon_ms, RankHeap& free_at,
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

// Phase 1 for one sequence: pops the ring's ranks from `free_at` and places the ring.
//
// A ring of k ranks ends at finish(k) = (when its k-th member is free) + cost(k) / slowest member,
// and also raises the average load: idle members waiting for the last one, and γ and transfer that
// grow with k. The step cannot end before either, so when no size ends by the horizon the ring takes
// the k minimising max(finish(k), average load after it). The average only grows with k, which
// bounds the search.
void place_ring(const PlanRequest& request, std::uint32_t sequence, std::int64_t next_tokens, double target_ms,
                Backlog& backlog, RankHeap& free_at, PlanBuilder& builder, std::vector<std::vector<Room>>& rooms) {
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
    rooms[r].clear();  // a short sequence never joins a micro-batch before this ring
    const std::int64_t held = member_tokens(tokens, size, static_cast<std::int64_t>(i));
    if (!offloaded && held < request.capacity) rooms[r].push_back({index, request.capacity - held});
    free_at.push(builder.finish_ms(r), r);
  }
}

// Phase 2 for one sequence.
void place_short(const PlanRequest& request, std::uint32_t sequence, double delta_ms, RankHeap& free_at,
                 PlanBuilder& builder, std::vector<std::vector<Room>>& rooms) {
  const std::int64_t tokens = request.lengths[sequence];
  std::vector<std::pair<double, std::uint32_t>> tied{free_at.pop()};
  while (!free_at.empty() && tied.size() < kMaxTiedRanks &&
         free_at.top().first <= tied.front().first + delta_ms) {
    tied.push_back(free_at.pop());
  }
  std::size_t chosen = 0;
  Room* best = nullptr;
  for (std::size_t i = 0; i < tied.size(); ++i) {
    for (Room& room : rooms[tied[i].second]) {
      if (room.tokens >= tokens && (best == nullptr || room.tokens < best->tokens)) {
        best = &room;
        chosen = i;
      }
    }
  }
  const std::uint32_t rank = tied[chosen].second;
  const double cost = request.cost.sequence_ms(tokens);
  if (best != nullptr) {
    builder.extend(best->micro_batch, rank, sequence, cost);
    best->tokens -= tokens;
  } else {
    const std::uint32_t index = builder.place({sequence}, {rank}, request.cost.gamma_ms + cost, 0.0, request.capacity);
    if (tokens < request.capacity) rooms[rank].push_back({index, request.capacity - tokens});
  }
  std::erase_if(rooms[rank], [](const Room& room) { return room.tokens == 0; });
  for (std::size_t i = 0; i < tied.size(); ++i) {
    free_at.push(i == chosen ? builder.finish_ms(rank) : tied[i].first, tied[i].second);
  }
}

}  // namespace

Plan plan_balanced(const PlanRequest& request) {
  const LowerBound bound = lower_bound(request);
  const double target_ms = bound.bound_ms();
  const double total_speed = std::accumulate(request.speeds.begin(), request.speeds.end(), 0.0);
  Backlog backlog{.remaining_ms = bound.work_ms * total_speed, .total_speed = total_speed};
  const double delta_ms = request.delta_ms.value_or(request.cost.gamma_ms / 2);
  PlanBuilder builder(request, Strategy::kBalanced);
  RankHeap free_at(request.speeds.size());
  std::vector<std::vector<Room>> rooms(request.speeds.size());
  const std::vector<std::uint32_t> order = longest_first(request.lengths);
  for (std::size_t i = 0; i < order.size(); ++i) {
    const std::uint32_t sequence = order[i];
    if (request.lengths[sequence] > request.capacity) {
      const std::int64_t next_tokens = i + 1 < order.size() ? request.lengths[order[i + 1]] : 0;
      place_ring(request, sequence, next_tokens, target_ms, backlog, free_at, builder, rooms);
    } else {
      place_short(request, sequence, delta_ms, free_at, builder, rooms);
    }
  }
  return builder.take();
}

}  // namespace hdp::mesh
