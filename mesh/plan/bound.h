// File: mesh/plan/bound.h
//
// The lower bound a plan is judged against (LB in `hdp plan`): no schedule of the batch on these
// ranks, under this cost model, can finish sooner.
#pragma once

#include "mesh/plan/plan.h"

namespace hdp::mesh {

struct LowerBound {
  // Σ (α·s² + β·s) + γ·ceil(tokens / largest per-rank capacity), over the total speed: every
  // micro-batch holds at most that many tokens per rank, and communication may be fully hidden.
  double work_ms = 0;
  // The longest sequence on the best number of ranks D (from D(s) to all), run by the D fastest.
  double sequence_ms = 0;
  double bound_ms() const { return work_ms > sequence_ms ? work_ms : sequence_ms; }
};

// The request must be valid (validate_request).
LowerBound lower_bound(const PlanRequest& request);

}  // namespace hdp::mesh
