// File: mesh/speed_tracker.h
//
// Per-rank speed factors from measured step times (the plan's `PlanRequest::speeds`; Malleus's idea
// in ARCHITECTURE.md, without a restart). The planner runs a micro-batch whose calibrated cost is c
// milliseconds (at speed 1) on rank r in c / speed[r]. After a step, each rank reports the cost of
// what it ran and how long that took; what it observed is
//
//   observed = Σ planned cost / Σ measured time
//
// and its speed moves towards that geometrically, speed ← speed^(1−w) · observed^w, so that a rank
// twice as slow and one twice as fast move alike. A rank's first report replaces the calibration's
// speed of 1 outright: the cost model may have been calibrated on another day, under another load,
// and the first step is the first sight of this machine now. So a machine that runs 10% slower than
// when it was calibrated is planned at 0.9 from its second step on, while the cost model's shape
// (α, β, γ) stays as calibrated.
//
// Every rank plans from the same speeds, so every rank keeps a tracker fed with every rank's reports.
// The arithmetic (std::pow included) gives identical speeds for identical reports on one build and
// one libm, the same condition under which ranks compute identical plans at all.
//
// Not thread-safe: one owner (the step loop). No call blocks.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace hdp::mesh {

class SpeedTracker {
 public:
  // `ranks` >= 1; `weight` (w above) in (0, 1], 1 = the last step alone. Throws InvalidArgument.
  SpeedTracker(std::size_t ranks, double weight);

  // One rank's step: the cost at speed 1 of the micro-batches it ran (ms, from the plan) and the
  // time they took (ms). A rank that ran nothing (planned 0) keeps its speed: an idle step says
  // nothing about it. Throws InvalidArgument for a rank out of range, a planned cost that is not a
  // finite number >= 0, or a measured time that is not a finite number > 0 (>= 0 when planned is 0).
  void report(std::size_t rank, double planned_ms, double measured_ms);

  // One factor per rank, each finite and > 0: what the next plan's PlanRequest::speeds takes.
  std::span<const double> speeds() const { return speeds_; }

 private:
  double weight_;
  std::vector<double> speeds_;
  std::vector<bool> reported_;  // whether a rank has reported: its speed is no longer the calibration's 1
};

}  // namespace hdp::mesh
