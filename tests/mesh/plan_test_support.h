// File: tests/mesh/plan_test_support.h
//
// Small helpers the scheduler tests share: building requests and measuring a rank's work.
#pragma once

#include <cstdint>
#include <vector>

#include "mesh/plan/plan.h"

namespace hdp::mesh::test {

// A request over `ranks` equal ranks with the GPU preset and C = `capacity`.
PlanRequest make_request(std::vector<std::int64_t> lengths, std::size_t ranks, std::int64_t capacity = 8192);

// A request whose batch of `tokens` tokens is drawn from `dist` at `context` with `seed`.
PlanRequest drawn_request(const char* dist, std::int64_t context, std::int64_t tokens, std::uint64_t seed,
                          std::size_t ranks, std::int64_t capacity = 8192);

}  // namespace hdp::mesh::test
