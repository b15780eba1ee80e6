#include "tests/mesh/plan_test_support.h"

#include "mesh/length_distribution.h"

namespace hdp::mesh::test {

PlanRequest make_request(std::vector<std::int64_t> lengths, std::size_t ranks, std::int64_t capacity) {
  PlanRequest request;
  request.lengths = std::move(lengths);
  request.speeds.assign(ranks, 1.0);
  request.capacity = capacity;
  request.cost = gpu_preset_7b();
  return request;
}

PlanRequest drawn_request(const char* dist, std::int64_t context, std::int64_t tokens, std::uint64_t seed,
                          std::size_t ranks, std::int64_t capacity) {
  auto request = make_request(draw_batch(named_distribution(dist), context, tokens, seed), ranks, capacity);
  request.context = context;
  return request;
}

double rank_work_ms(const PlanRequest& request, const Plan& plan, std::uint32_t rank) {
  double work = 0;
  for (std::uint32_t index : plan.rank_queues[rank]) {
    const MicroBatch& batch = plan.micro_batches[index];
    std::vector<std::int64_t> lengths;
    for (std::uint32_t s : batch.sequences) lengths.push_back(request.lengths[s]);
    work += request.cost.micro_batch_ms(lengths, static_cast<std::int64_t>(batch.ranks.size()));
    for (const LocalSequence& l : batch.local) {
      if (l.rank == rank) work += request.cost.sequence_ms(request.lengths[l.sequence]);
    }
  }
  return work;
}

}  // namespace hdp::mesh::test
