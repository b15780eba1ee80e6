// File: mesh/plan/cost_fit.h
//
// Fits the compute part of the cost model to measured micro-batches: a micro-batch packing whole
// sequences s₁…sₙ on one rank takes
//
//   t = γ + Σ (α·s_i² + β·s_i)
//
// which is linear in (α, β, γ) with regressors Σs², Σs and 1, so least squares gives them. The fit
// minimises the relative residuals (weights 1/t²): the timed micro-batches span two orders of
// magnitude and the planner needs every one of them predicted to a few per cent, not the largest
// to a few milliseconds. Coefficients are constrained to be >= 0 (a negative γ fitted to noise would
// make small micro-batches cost less than nothing): the fit solves every subset of the three
// coefficients with the others held at 0 and keeps the best whose coefficients are all >= 0, which
// is exact non-negative least squares for three unknowns.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "mesh/plan/cost_model.h"

namespace hdp::mesh {

// One timed micro-batch: the lengths of the sequences packed in it and its measured time.
struct CostSample {
  std::vector<std::int64_t> lengths;
  double measured_ms = 0;
};

// Sets model.alpha_ms, beta_ms and gamma_ms to the fit; the ring and offload fields are left alone.
// Throws InvalidArgument with fewer than 3 samples, a sample without tokens or with a measured time
// that is not a finite number > 0, or samples that cannot tell the three apart: their points
// (Σs², Σs) all on one line, e.g. single sequences of fewer than three distinct lengths.
void fit_compute_cost(std::span<const CostSample> samples, CostModel& model);

// model.micro_batch_ms(lengths, 1) / measured - 1 for every sample, in order.
std::vector<double> relative_residuals(const CostModel& model, std::span<const CostSample> samples);

}  // namespace hdp::mesh
