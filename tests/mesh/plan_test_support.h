// File: tests/mesh/plan_test_support.h
//
// Small helpers the scheduler tests share: building requests and measuring a rank's work.
#pragma once

#include <cstdint>
#include <vector>

#include "mesh/plan.h"

namespace hdp::mesh::test {

// A request over `ranks` equal ranks with the GPU preset and C = `capacity`.
PlanRequest make_request(std::vector<std::int64_t> lengths, std::size_t ranks, std::int64_t capacity = 8192);

// A request whose batch of `tokens` tokens is drawn from `dist` at `context` with `seed`.
PlanRequest drawn_request(const char* dist, std::int64_t context, std::int64_t tokens, std::uint64_t seed,
                          std::size_t ranks, std::int64_t capacity = 8192);

// The cost at speed 1 of everything rank `rank` runs: its share of every ring it is in, its local
// micro-batches and the whole sequences it runs beside ring shards.
double rank_work_ms(const PlanRequest& request, const Plan& plan, std::uint32_t rank);

}  // namespace hdp::mesh::test
