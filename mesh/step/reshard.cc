#include "mesh/step/reshard.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "common/error.h"

namespace hdp::mesh {
namespace {

std::vector<std::int64_t> offsets_of(const std::vector<std::int64_t>& counts) {
  std::vector<std::int64_t> offsets(counts.size() + 1, 0);
  for (std::size_t i = 0; i < counts.size(); ++i) offsets[i + 1] = offsets[i] + counts[i];
  return offsets;
}

// The fixed part of a HeldState on the wire: layout, old world, old rank, completed, params step,
// 3 x (step, epoch, sample), the number of pairs, the 4 job digests.
constexpr std::int64_t kFixed = 19;

// Tags of shard k's transfers: exp_avg, exp_avg_sq, parameters.
Tag tag_of(int shard, int which) { return kReshardTag + 3 * static_cast<Tag>(shard) + static_cast<Tag>(which); }

}  // namespace

ReshardPlan plan_reshard(const std::vector<HeldState>& ranks, std::int64_t n) {
  ReshardPlan plan;
  const int world = static_cast<int>(ranks.size());
  if (world < 1 || n < 0) throw InvalidArgument("plan_reshard: no ranks, or a negative size");
  std::set<std::int64_t, std::greater<>> layouts;
  for (const HeldState& s : ranks) {
    plan.furthest = std::max(plan.furthest, s.completed);
    if (s.layout < 0) continue;
    if (s.old_world < 1) throw InvalidArgument("plan_reshard: layout " + std::to_string(s.layout) + " has no ranks");
    for (const auto& h : s.held) {
      if (h.owner < 0 || h.owner >= s.old_world || h.step < 0) {
        throw InvalidArgument("plan_reshard: shard " + std::to_string(h.owner) + " at step " + std::to_string(h.step) +
                              " is outside layout " + std::to_string(s.layout) + " of " + std::to_string(s.old_world) +
                              " ranks");
      }
    }
    layouts.insert(s.layout);
  }
  auto position_at = [&](std::int64_t step) -> std::optional<DataMark> {
    for (const HeldState& s : ranks) {
      for (const DataMark& p : s.positions) {
        if (p.step == step) return p;
      }
    }
    return std::nullopt;
  };
  if (layouts.empty()) {
    plan.why = "no rank holds a training state";
    return plan;
  }
  // Each layout's largest complete step; the layout complete at the largest step wins (ties: the
  // newest). Generation numbers restart with an emptied store, so an id alone cannot order them.
  std::optional<std::pair<std::int64_t, std::int64_t>> best;  // {T, layout}
  int old_world = 0;
  for (std::int64_t layout : layouts) {
    int world_of_layout = 0;
    // step -> the shards held at that step
    std::map<std::int64_t, std::set<int>, std::greater<>> by_step;
    for (const HeldState& s : ranks) {
      if (s.layout != layout) continue;
      if (world_of_layout != 0 && s.old_world != world_of_layout) {
        throw InvalidArgument("plan_reshard: layout " + std::to_string(layout) + " reported with " +
                              std::to_string(world_of_layout) + " and " + std::to_string(s.old_world) + " ranks");
      }
      world_of_layout = s.old_world;
      for (const auto& h : s.held) by_step[h.step].insert(h.owner);
    }
    std::optional<std::int64_t> chosen;
    int missing = -1;
    std::int64_t missing_at = -1;
    for (const auto& [step, shards] : by_step) {
      if (static_cast<int>(shards.size()) == world_of_layout && position_at(step)) {
        chosen = step;
        break;
      }
      if (missing < 0) {
        missing_at = step;
        for (int k = 0; k < world_of_layout; ++k) {
          if (!shards.count(k)) {
            missing = k;
            break;
          }
        }
      }
    }
    if (!chosen) {
      if (plan.why.empty()) {
        plan.why = missing >= 0 ? "no surviving rank holds rank " + std::to_string(missing) + "'s optimizer shard (of " +
                                      std::to_string(world_of_layout) + ", at step " + std::to_string(missing_at) +
                                      "): every copy of it was lost"
                                : "no surviving rank knows the data position of step " + std::to_string(missing_at);
      }
      continue;
    }
    if (!best || *chosen > best->first) {
      best = {*chosen, layout};
      old_world = world_of_layout;
    }
  }
  if (best) {
    const std::int64_t layout = best->second;
    plan.possible = true;
    plan.why.clear();
    plan.layout = layout;
    plan.old_world = old_world;
    plan.step = best->first;
    plan.position = *position_at(plan.step);
    // Shard k's source: its old owner if that rank holds (k, T), else the lowest new rank that
    // does. One pass over the ranks in order: a lower rank is seen first, and the first rank
    // whose old rank is k takes the shard over whenever it comes.
    plan.source.assign(static_cast<std::size_t>(old_world), -1);
    std::vector<bool> by_owner(static_cast<std::size_t>(old_world), false);  // the source is k's old owner
    for (int r = 0; r < world; ++r) {
      const HeldState& s = ranks[static_cast<std::size_t>(r)];
      if (s.layout != layout) continue;
      for (const auto& h : s.held) {
        if (h.step != plan.step) continue;
        const auto k = static_cast<std::size_t>(h.owner);
        if (by_owner[k]) continue;
        if (plan.source[k] < 0) plan.source[k] = r;
        if (s.old_rank == h.owner) {
          plan.source[k] = r;
          by_owner[k] = true;
        }
      }
    }
    plan.receives_params.resize(static_cast<std::size_t>(world));
    for (int r = 0; r < world; ++r) {
      plan.receives_params[static_cast<std::size_t>(r)] = ranks[static_cast<std::size_t>(r)].params_step != plan.step;
    }
    const std::vector<std::int64_t> old_counts = shard_counts(n, old_world), new_counts = shard_counts(n, world);
    const std::vector<std::int64_t> old_off = offsets_of(old_counts), new_off = offsets_of(new_counts);
    // The overlaps of two sorted partitions of [0, n): a merge, by new rank then old shard. An old
    // shard that ends at or before new shard j's start overlaps no later one either.
    int first_k = 0;
    for (int j = 0; j < world; ++j) {
      const std::int64_t j_begin = new_off[static_cast<std::size_t>(j)], j_end = new_off[static_cast<std::size_t>(j) + 1];
      while (first_k < old_world && old_off[static_cast<std::size_t>(first_k) + 1] <= j_begin) ++first_k;
      for (int k = first_k; k < old_world && old_off[static_cast<std::size_t>(k)] < j_end; ++k) {
        const std::int64_t begin = std::max(j_begin, old_off[static_cast<std::size_t>(k)]);
        const std::int64_t end = std::min(j_end, old_off[static_cast<std::size_t>(k) + 1]);
        if (end > begin) plan.pieces.push_back({k, plan.source[static_cast<std::size_t>(k)], j, begin, end});
      }
    }
    return plan;
  }
  return plan;
}

std::vector<HeldState> exchange_states(const HeldState& mine, Communicator& comm, std::chrono::milliseconds timeout) {
  const int world = comm.size();
  std::vector<std::int64_t> fixed = {mine.layout, mine.old_world, mine.old_rank, mine.completed, mine.params_step};
  for (const DataMark& p : mine.positions) {
    fixed.push_back(p.step);
    fixed.push_back(static_cast<std::int64_t>(p.epoch));
    fixed.push_back(static_cast<std::int64_t>(p.sample));
  }
  fixed.push_back(static_cast<std::int64_t>(mine.held.size()));
  for (const std::uint64_t d : mine.job) fixed.push_back(static_cast<std::int64_t>(d));
  // On the communicator's home device (NCCL takes device tensors only), read back on the host.
  const ops::Tensor own = ops::Tensor::from_vector<std::int64_t>(fixed, {kFixed}).to(comm.home());
  const ops::Tensor all = ops::Tensor::zeros({kFixed * world}, ops::DType::kI64, comm.home());
  comm.allgather(own, all, std::vector<std::int64_t>(static_cast<std::size_t>(world), kFixed), timeout);
  const std::vector<std::int64_t> all_fixed = all.to_vector<std::int64_t>();
  const std::int64_t* f = all_fixed.data();
  std::vector<HeldState> states(static_cast<std::size_t>(world));
  std::vector<std::int64_t> counts(static_cast<std::size_t>(world));
  std::int64_t total = 0;
  for (int r = 0; r < world; ++r) {
    const std::int64_t* x = f + kFixed * r;
    HeldState& s = states[static_cast<std::size_t>(r)];
    s.layout = x[0];
    s.old_world = static_cast<int>(x[1]);
    s.old_rank = static_cast<int>(x[2]);
    s.completed = x[3];
    s.params_step = x[4];
    for (int i = 0; i < 3; ++i) {
      s.positions[static_cast<std::size_t>(i)] = {x[5 + 3 * i], static_cast<std::uint64_t>(x[6 + 3 * i]),
                                                  static_cast<std::uint64_t>(x[7 + 3 * i])};
    }
    for (std::size_t i = 0; i < s.job.size(); ++i) s.job[i] = static_cast<std::uint64_t>(x[15 + i]);
    if (x[14] < 0 || x[14] > (std::int64_t{1} << 24)) {
      throw InvalidArgument("exchange_states: rank " + std::to_string(r) + " reports " + std::to_string(x[14]) + " shards");
    }
    counts[static_cast<std::size_t>(r)] = 2 * x[14];
    total += 2 * x[14];
  }
  std::vector<std::int64_t> pairs;
  for (const auto& h : mine.held) {
    pairs.push_back(h.owner);
    pairs.push_back(h.step);
  }
  const ops::Tensor own_pairs =
      ops::Tensor::from_vector<std::int64_t>(pairs, {static_cast<std::int64_t>(pairs.size())}).to(comm.home());
  const ops::Tensor all_pairs = ops::Tensor::zeros({total}, ops::DType::kI64, comm.home());
  comm.allgather(own_pairs, all_pairs, counts, timeout);
  const std::vector<std::int64_t> all_held = all_pairs.to_vector<std::int64_t>();
  const std::int64_t* p = all_held.data();
  for (int r = 0; r < world; ++r) {
    for (std::int64_t i = 0; i < counts[static_cast<std::size_t>(r)]; i += 2, p += 2) {
      states[static_cast<std::size_t>(r)].held.push_back({static_cast<int>(p[0]), p[1]});
    }
  }
  return states;
}

ReshardTraffic execute_reshard(const ReshardPlan& plan, Communicator& comm, const std::vector<ZeroOptimizer::Version>& mine,
                               const ops::Tensor& params, ZeroOptimizer& next, std::chrono::milliseconds timeout) {
  if (!plan.possible) throw InvalidArgument("execute_reshard: the plan is not possible: " + plan.why);
  const int me = comm.rank(), world = comm.size();
  const std::int64_t n = params.numel();
  if (static_cast<int>(plan.receives_params.size()) != world || next.counts().size() != static_cast<std::size_t>(world)) {
    throw InvalidArgument("execute_reshard: the plan or the optimizer is for another world size");
  }
  const ops::Tensor flat = params.reshape({n});
  const std::vector<std::int64_t> old_counts = shard_counts(n, plan.old_world);
  const std::vector<std::int64_t> old_off = offsets_of(old_counts);
  auto version = [&](int shard) -> const ZeroOptimizer::Version& {
    for (const auto& v : mine) {
      if (v.owner == shard && v.step == plan.step) return v;
    }
    throw InvariantViolation("execute_reshard: rank " + std::to_string(me) + " is the source of shard " +
                             std::to_string(shard) + " at step " + std::to_string(plan.step) + " but does not hold it");
  };
  ReshardTraffic traffic;
  std::vector<std::unique_ptr<Work>> work;
  const std::size_t element = ops::dtype_size(params.dtype());  // bytes per element
  // Parameters: every range to every rank that receives them, from the range's source.
  for (int k = 0; k < plan.old_world; ++k) {
    const std::int64_t count = old_counts[static_cast<std::size_t>(k)];
    if (count == 0) continue;
    const int src = plan.source[static_cast<std::size_t>(k)];
    const ops::Tensor range = flat.view(old_off[static_cast<std::size_t>(k)], {count});
    if (src == me) {
      const ops::Tensor& held = version(k).params;
      if (held.raw() != range.raw()) range.copy_from(held);
      for (int r = 0; r < world; ++r) {
        if (r == me || !plan.receives_params[static_cast<std::size_t>(r)]) continue;
        work.push_back(comm.isend(held, r, tag_of(k, 2)));
        traffic.bytes_sent += static_cast<std::uint64_t>(count) * element;
      }
    } else if (plan.receives_params[static_cast<std::size_t>(me)]) {
      work.push_back(comm.irecv(range, src, tag_of(k, 2)));
      traffic.bytes_received += static_cast<std::uint64_t>(count) * element;
    }
  }
  // The new shards' optimizer state, piece by piece.
  for (const auto& piece : plan.pieces) {
    if (piece.from != me && piece.to != me) continue;
    const std::int64_t len = piece.end - piece.begin;
    const std::int64_t at_old = piece.begin - old_off[static_cast<std::size_t>(piece.shard)];
    const std::int64_t at_new = piece.begin - next.offset();
    if (piece.to == me) {
      const ops::Tensor m = next.exp_avg().view(at_new, {len}), v = next.exp_avg_sq().view(at_new, {len});
      if (piece.from == me) {
        const auto& held = version(piece.shard);
        m.copy_from(held.exp_avg.view(at_old, {len}));
        v.copy_from(held.exp_avg_sq.view(at_old, {len}));
      } else {
        work.push_back(comm.irecv(m, piece.from, tag_of(piece.shard, 0)));
        work.push_back(comm.irecv(v, piece.from, tag_of(piece.shard, 1)));
        traffic.bytes_received += 2 * static_cast<std::uint64_t>(len) * element;
      }
    } else {
      const auto& held = version(piece.shard);
      work.push_back(comm.isend(held.exp_avg.view(at_old, {len}), piece.to, tag_of(piece.shard, 0)));
      work.push_back(comm.isend(held.exp_avg_sq.view(at_old, {len}), piece.to, tag_of(piece.shard, 1)));
      traffic.bytes_sent += 2 * static_cast<std::uint64_t>(len) * element;
    }
  }
  for (auto& w : work) w->wait(timeout);
  next.set_steps_taken(plan.step);
  return traffic;
}

}  // namespace hdp::mesh
