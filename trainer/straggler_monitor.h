// File: trainer/straggler_monitor.h
//
// Stragglers (docs/architecture.md, "Stragglers"), as the trainer sees them: every rank keeps the
// same speed record of every worker of the generation (mesh/plan/speed_tracker.h), plans each step
// with those speeds, and after each step learns every rank's compute time (the trainer's per-step
// all-gather) and the work the plan gave it. Rank 0 reports a rank that turns slow (event
// `straggler`) and asks the leader to evict one that stayed slow (the key stragglers:<g>), never
// below the job's minimum number of nodes (event `evict_refused`).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "elastic/elastic_context.h"
#include "elastic/store.h"
#include "mesh/comm/communicator.h"
#include "mesh/plan/planned_step.h"
#include "mesh/plan/speed_tracker.h"
#include "trainer/step_reporter.h"
#include "trainer/trainer_config.h"

namespace hdp::trainer {

class StragglerMonitor {
 public:
  // `config` and `events` must outlive this object.
  StragglerMonitor(const TrainerConfig& config, std::shared_ptr<elastic::Store> store, EventLog& events);

  // Collective, at a generation's start: every rank hands the others its own speed record, so that
  // all plan from identical speeds whoever joined (strikes start again: a resize, an eviction
  // among them, begins a new count). Rank 0 reads how often each node/slot was evicted before (the
  // strikes an eviction needs double with each). `min_nodes`: the job's minimum number of nodes.
  void start_generation(const elastic::Membership& m, mesh::Communicator& comm, int min_nodes);

  // The speeds to plan the next step with (1 for every rank when config.speed_aware is false).
  std::vector<double> plan_speeds(int world_size) const;
  // The step about to run was planned so (each rank's work at speed 1, the speeds used).
  void planned(const mesh::PlannedStep& step);
  // This rank's compute time of the step it just ran.
  void computed(double compute_ms) { last_compute_ms_ = compute_ms; }
  // The configuration's straggler threshold changed (a live setting): strikes count with it from
  // the next step on.
  void threshold_changed();
  // What this rank contributes to the next step's all-gather: its compute time of the step before
  // in µs (-1: none in this generation).
  std::int64_t compute_us() const;

  // The step before, as every rank measured it (`compute_us[r]`, µs): each rank's compute time over
  // its planned work is its speed. Rank 0 reports stragglers and may ask for an eviction. `step`:
  // the steps completed.
  void observe(const elastic::Membership& m, std::int64_t step, const std::vector<std::int64_t>& compute_us);

  // Rank 0 asked the leader for an eviction in this generation: the ranks leave at the next
  // boundary, and the leader answers with a new generation.
  bool eviction_requested() const { return eviction_requested_; }

  SpeedFigures figures() const { return {relative_, last_plan_speeds_}; }

 private:
  struct Place {
    std::string node, incarnation;
    int slot = 0;
  };

  const TrainerConfig& config_;
  std::shared_ptr<elastic::Store> store_;
  EventLog& events_;
  mesh::SpeedTracker speeds_;          // every rank holds the same contents
  std::vector<std::string> workers_;   // this generation's, in rank order
  std::vector<Place> places_;          // the same, as node, incarnation, slot
  std::vector<double> last_work_;      // the step before: each rank's planned cost at speed 1 (ms)
  double last_compute_ms_ = -1;        // the step before: this rank's compute; < 0 none in this generation
  std::vector<double> relative_;       // each rank's speed relative to the median, last measured
  std::vector<double> last_plan_speeds_;
  std::map<std::string, std::int64_t> prior_evictions_;  // rank 0: evictions so far by node/slot
  bool eviction_requested_ = false;    // rank 0: already asked in this generation
  bool kept_ = false;                  // rank 0: kept its stragglers in this generation (minimum size)
  int min_nodes_ = 1;                  // the job's minimum number of nodes
};

}  // namespace hdp::trainer
