// File: mesh/plan/strategies.h
//
// Internal to hdp_mesh_plan: the three planners behind make_plan (request already validated), and the
// helpers they share.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "mesh/plan/plan.h"

namespace hdp::mesh {

Plan plan_static(const PlanRequest& request);
Plan plan_naive(const PlanRequest& request);
Plan plan_balanced(const PlanRequest& request);

// Best-fit decreasing: `order` lists sequence indices longest first; each goes into the open bin it
// leaves the least room in, or a new bin. A sequence counts as its length rounded up to a multiple of
// `ring_size` and bins hold at most ring_size·capacity such tokens: every ring member then holds at
// most ceil(s/ring_size) tokens of each sequence, so at most `capacity` in all.
std::vector<std::vector<std::uint32_t>> best_fit_pack(std::span<const std::int64_t> lengths,
                                                      std::span<const std::uint32_t> order, std::int64_t ring_size,
                                                      std::int64_t capacity);

// Indices of the sequences with at least one token, longest first, ties by index.
std::vector<std::uint32_t> longest_first(std::span<const std::int64_t> lengths);

// The ring size in [min_ranks, max_ranks] that runs a sequence fastest under the cost model. The
// ring time falls as 1/D while compute hides the transfer, and past that point is a convex function
// of 1/D, so it is unimodal in D and a ternary search finds the minimum.
std::int64_t fastest_ring_size(const CostModel& model, std::int64_t tokens, std::int64_t min_ranks,
                               std::int64_t max_ranks);

// The smallest ring size whose time is within `slack` (e.g. 0.02) of the fastest one: past this knee
// more ranks buy almost no time but cost γ and transfer on every added rank.
std::int64_t knee_ring_size(const CostModel& model, std::int64_t tokens, std::int64_t min_ranks,
                            std::int64_t max_ranks, double slack);

}  // namespace hdp::mesh
