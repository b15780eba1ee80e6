// File: mesh/plan/plan_check.h
//
// Checks a plan against its request, independently of the planner that made it.
#pragma once

#include "mesh/plan/plan.h"

namespace hdp::mesh {

// Throws InvariantViolation naming the first broken rule:
// - every sequence with tokens is in exactly one micro-batch, cut over its ring or whole (so, with
//   the 2D-chunk cut, every token runs exactly once), and no empty sequence is;
// - a ring's ranks are distinct live ranks, and every rank's queue lists exactly its micro-batches;
// - no member holds more than the micro-batch's rank capacity, which is C unless offloading;
// - slots strictly increase along every queue, and replaying the queues (a micro-batch runs when it
//   heads the queue of every member) runs every micro-batch: the plan cannot deadlock.
void verify_plan(const PlanRequest& request, const Plan& plan);

}  // namespace hdp::mesh
