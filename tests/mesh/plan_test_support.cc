#include "tests/mesh/plan_test_support.h"

#include "mesh/plan/length_distribution.h"

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

}  // namespace hdp::mesh::test
