// File: mesh/plan/planned_step.h
//
// One step's plan as one value: the request it was made from, the plan, and what the trainer
// derives from them (each rank's planned work, the plan's digest). Made once per step by
// plan_step(), which checks the plan against its own request there; mesh::DistributedStep runs
// it as it is, checking only that it is given the batch and the world the plan was made for.
//
// Example:
//   PlannedStep planned = plan_step(std::move(request), Strategy::kBalanced);
//   DistributedStep(model, zero, comm, options).run(planned, batch.sequences);
#pragma once

#include <cstdint>
#include <vector>

#include "mesh/plan/plan.h"

namespace hdp::mesh {

struct PlannedStep {
  PlanRequest request;
  Plan plan;
  std::vector<double> work_ms;  // rank_work_ms (plan_summary.h): each rank's cost at speed 1
  std::uint64_t digest = 0;     // plan_digest (plan_summary.h): equal on every rank iff the plans are
};

// make_plan (InvalidArgument for a request that cannot be planned), then verify_plan against the
// same request (InvariantViolation: a planner broke a rule of plan_check.h).
PlannedStep plan_step(PlanRequest request, Strategy strategy);

}  // namespace hdp::mesh
