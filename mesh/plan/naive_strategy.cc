// ByteScale Algorithm 1 (naive HDP): a sequence longer than C spans exactly D(s) ranks (Eq. 3 when
// offloading, else ceil(s/C)); shorter ones are packed best-fit into micro-batches of C tokens. The
// resulting work items, most tokens first, go to the ranks holding the fewest tokens so far: HDP's
// definition of balance ("evenly distribute tokens"), blind to quadratic attention and to speeds.
#include "mesh/plan/plan_builder.h"
#include "mesh/plan/rank_heap.h"
#include "mesh/plan/sharding.h"
#include "mesh/plan/strategies.h"

namespace hdp::mesh {
namespace {

struct Item {
  std::vector<std::uint32_t> sequences;
  std::int64_t tokens = 0;
  ShardLimit limit;
};

}  // namespace

Plan plan_naive(const PlanRequest& request) {
  const CostModel& model = request.cost;
  std::vector<Item> items;
  std::vector<std::uint32_t> short_ones;
  for (std::uint32_t sequence : longest_first(request.lengths)) {
    const std::int64_t tokens = request.lengths[sequence];
    if (tokens > request.capacity) {
      items.push_back({{sequence}, tokens, shard_limit(model, tokens, request.capacity, request.offload)});
    } else {
      short_ones.push_back(sequence);
    }
  }
  for (auto& bin : best_fit_pack(request.lengths, short_ones, 1, request.capacity)) {
    std::int64_t tokens = 0;
    for (std::uint32_t sequence : bin) tokens += request.lengths[sequence];
    items.push_back({std::move(bin), tokens, ShardLimit{.min_ranks = 1, .rank_capacity = request.capacity}});
  }
  // Long sequences come first already; packed bins are appended in packing order, fullest first.

  PlanBuilder builder(request, Strategy::kNaive);
  RankHeap fewest_tokens(request.speeds.size());
  for (Item& item : items) {
    const std::int64_t size = item.limit.min_ranks;
    std::vector<std::pair<double, std::uint32_t>> members(static_cast<std::size_t>(size));
    for (auto& m : members) m = fewest_tokens.pop();
    std::vector<std::uint32_t> ring;
    ring.reserve(members.size());
    for (const auto& m : members) ring.push_back(m.second);
    std::vector<std::int64_t> lengths;
    for (std::uint32_t sequence : item.sequences) lengths.push_back(request.lengths[sequence]);
    builder.place(std::move(item.sequences), ring, model.micro_batch_ms(lengths, size), item.limit.offload_ratio,
                  item.limit.rank_capacity);
    for (std::size_t i = 0; i < members.size(); ++i) {
      const auto held = member_tokens(item.tokens, size, static_cast<std::int64_t>(i));
      fewest_tokens.push(members[i].first + static_cast<double>(held), members[i].second);
    }
  }
  return builder.take();
}

}  // namespace hdp::mesh
