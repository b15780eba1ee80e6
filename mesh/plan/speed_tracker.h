// File: mesh/plan/speed_tracker.h
//
// Per-worker speed factors from measured compute times: the plan's `PlanRequest::speeds` (Malleus's
// idea, without a restart) and what tells a straggler. The planner runs a micro-batch whose cost
// model cost is c ms (at speed 1) on rank r in c / speed[r]. After a step, each rank reports the
// cost of what it ran (rank_work_ms, plan_summary.h) and how long its compute took; what it shows is
//
//   observed = planned cost / measured time
//
// Workers are keyed by a stable name (the trainer's: node/incarnation/slot), not by rank, since
// ranks are renumbered at every resize.
//
// The filter, and why. A worker's filtered speed is the median of its last three observations: one
// noisy step (a page fault storm, another process on the core, a slow allocation) never moves it,
// while a lasting change is followed in full on the second step after it (two of three
// observations): a rank slowed from step s is planned at its new speed from step s + 2, the
// issue's "within 2 steps". An exponential average would do neither: it either follows noise or
// needs many steps to reach a change, and never reaches it exactly. Then a dead band: the speed
// plans use moves to the filtered one only when they differ by more than `band` (10%); differences
// below that are within the scatter of one step's timings on a shared machine, and a plan chasing
// them moves work back and forth between equal ranks.
//
// A strike is a step whose filtered speed is below `slow_below` (0.35) of the median filtered speed
// of the generation's measured workers; strikes count consecutive steps and reset at the first step
// above. The trainer asks the leader to evict a worker after enough strikes (trainer/straggler
// policy in docs/architecture.md).
//
// Every rank plans from the same speeds, so every rank keeps a tracker fed with every rank's
// reports, in the same order; the arithmetic is deterministic on one build. A rank that joins a
// generation knows nothing of the others' history: at a generation change every rank hands the
// others its own record (record()/restore()), which is then identical everywhere.
//
// Not thread-safe: one owner (the step loop). No call blocks.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace hdp::mesh {

struct SpeedOptions {
  double band = 0.10;        // see above; >= 0
  double slow_below = 0.35;  // a strike: filtered speed below this fraction of the median; in (0, 1)
};

// One worker's history: what it hands the others at a generation change.
struct SpeedRecord {
  static constexpr std::size_t kWindow = 3;
  std::array<double, kWindow> recent{};  // observed speeds, oldest first; 0 = none yet
  double planned = 0;                    // the speed its plans use; 0 = not measured yet
  double strikes = 0;                    // consecutive steps below slow_below of the median
};

class SpeedTracker {
 public:
  // InvalidArgument for options out of range.
  explicit SpeedTracker(SpeedOptions options = {});

  // One worker's step: the cost at speed 1 of what it ran (ms, from the plan) and the time it
  // took (ms). A worker that ran nothing (planned 0) keeps its speed: an idle step says nothing
  // about it. Throws InvalidArgument for a planned cost that is not a finite number >= 0, or a
  // measured time that is not a finite number > 0 (>= 0 when planned is 0).
  void report(const std::string& worker, double planned_ms, double measured_ms);

  // Ends a step of the generation whose workers are `workers`, in rank order: each planned speed
  // moves to the filtered one where that left the band, and strikes are counted. Returns each
  // rank's filtered speed relative to the median of the measured ones (1 for a worker not
  // measured yet).
  std::vector<double> end_step(std::span<const std::string> workers);

  // The speeds to plan these workers with, in rank order: each one's planned speed; a worker not
  // measured yet takes the median of the others' (1 when none is), a guess that is right for equal
  // hardware and that its second step corrects.
  std::vector<double> plan_speeds(std::span<const std::string> workers) const;

  // Median of the last observations; 0 for a worker never measured.
  double filtered(const std::string& worker) const;
  std::int64_t strikes(const std::string& worker) const;

  // A new strike threshold from the next end_step() on (a live setting); InvalidArgument outside (0, 1).
  void set_slow_below(double slow_below);

  SpeedRecord record(const std::string& worker) const;  // a default record for one never seen
  // InvalidArgument for a record whose numbers are not finite and >= 0.
  void restore(const std::string& worker, const SpeedRecord& record);

 private:
  SpeedOptions options_;
  std::map<std::string, SpeedRecord> records_;
};

}  // namespace hdp::mesh
