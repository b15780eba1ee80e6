#include "mesh/plan/plan_summary.h"

#include <algorithm>
#include <limits>
#include <vector>

#include <xxhash.h>

namespace hdp::mesh {
namespace {

// The plan's numbers in order, hashed once (xxh3-64 of their bytes).
class PlanWords {
 public:
  void add(std::uint64_t value) { words_.push_back(value); }
  std::uint64_t value() const { return XXH3_64bits(words_.data(), words_.size() * sizeof(std::uint64_t)); }

 private:
  std::vector<std::uint64_t> words_;
};

class SpreadBuilder {
 public:
  void add(double x) {
    min_ = std::min(min_, x);
    max_ = std::max(max_, x);
    sum_ += x;
    ++count_;
  }
  Spread spread() const {
    if (count_ == 0) return {};
    return {min_, sum_ / static_cast<double>(count_), max_};
  }

 private:
  double min_ = std::numeric_limits<double>::infinity();
  double max_ = -std::numeric_limits<double>::infinity();
  double sum_ = 0;
  std::int64_t count_ = 0;
};

}  // namespace

std::vector<double> rank_work_ms(const PlanRequest& request, const Plan& plan) {
  std::vector<double> work(plan.rank_queues.size(), 0.0);
  std::vector<std::int64_t> lengths;
  for (const MicroBatch& batch : plan.micro_batches) {
    lengths.clear();
    for (std::uint32_t s : batch.sequences) lengths.push_back(request.lengths[s]);
    const double member_ms = request.cost.micro_batch_ms(lengths, static_cast<std::int64_t>(batch.ranks.size()));
    for (std::uint32_t r : batch.ranks) work[r] += member_ms;
    for (const LocalSequence& l : batch.local) work[l.rank] += request.cost.sequence_ms(request.lengths[l.sequence]);
  }
  return work;
}

std::uint64_t plan_digest(const Plan& plan) {
  PlanWords hash;
  hash.add(static_cast<std::uint64_t>(plan.strategy));
  for (const MicroBatch& batch : plan.micro_batches) {
    hash.add(batch.slot);
    hash.add(batch.ranks.size());
    for (std::uint32_t r : batch.ranks) hash.add(r);
    hash.add(batch.sequences.size());
    for (std::uint32_t s : batch.sequences) hash.add(s);
    hash.add(batch.local.size());
    for (const LocalSequence& l : batch.local) {
      hash.add(l.rank);
      hash.add(l.sequence);
    }
  }
  for (const auto& queue : plan.rank_queues) {
    hash.add(queue.size());
    for (std::uint32_t index : queue) hash.add(index);
  }
  return hash.value();
}

PlanSummary summarize(const PlanRequest& request, const Plan& plan) {
  PlanSummary summary;
  summary.bound = lower_bound(request);
  SpreadBuilder ring_sizes;
  for (const MicroBatch& batch : plan.micro_batches) {
    const auto size = static_cast<std::int64_t>(batch.ranks.size());
    std::int64_t tokens = 0;
    for (std::uint32_t s : batch.sequences) {
      tokens += request.lengths[s];
      if (size > 1) ring_sizes.add(static_cast<double>(size));
    }
    summary.ring_bytes += request.cost.ring_bytes(tokens, size);
    if (size > 1) summary.sharded_sequences += static_cast<std::int64_t>(batch.sequences.size());
  }
  for (std::int64_t s : request.lengths) {
    summary.tokens += s;
    summary.sequences += s > 0 ? 1 : 0;
  }
  for (double finish : plan.finish_ms) summary.makespan_ms = std::max(summary.makespan_ms, finish);
  summary.ranks_per_sharded = ring_sizes.spread();
  SpreadBuilder per_rank;
  for (const auto& queue : plan.rank_queues) per_rank.add(static_cast<double>(queue.size()));
  summary.micro_batches_per_rank = per_rank.spread();
  summary.imbalance = summary.makespan_ms / summary.bound.bound_ms();
  summary.digest = plan_digest(plan);
  return summary;
}

}  // namespace hdp::mesh
