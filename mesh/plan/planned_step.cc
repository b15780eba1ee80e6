#include "mesh/plan/planned_step.h"

#include "mesh/plan/plan_check.h"
#include "mesh/plan/plan_summary.h"

namespace hdp::mesh {

PlannedStep plan_step(PlanRequest request, Strategy strategy) {
  PlannedStep step;
  step.plan = make_plan(request, strategy);
  verify_plan(request, step.plan);
  step.work_ms = rank_work_ms(request, step.plan);
  step.digest = plan_digest(step.plan);
  step.request = std::move(request);
  return step;
}

}  // namespace hdp::mesh
