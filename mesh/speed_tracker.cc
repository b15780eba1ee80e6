#include "mesh/speed_tracker.h"

#include <cmath>
#include <string>

#include "common/error.h"

namespace hdp::mesh {

SpeedTracker::SpeedTracker(std::size_t ranks, double weight)
    : weight_(weight), speeds_(ranks, 1.0), reported_(ranks, false) {
  if (ranks == 0) throw InvalidArgument("speed tracker: needs at least one rank");
  if (!(weight > 0 && weight <= 1)) {
    throw InvalidArgument("speed tracker: weight must be in (0, 1], got " + std::to_string(weight));
  }
}

void SpeedTracker::report(std::size_t rank, double planned_ms, double measured_ms) {
  if (rank >= speeds_.size()) {
    throw InvalidArgument("speed tracker: rank " + std::to_string(rank) + " out of range (" +
                          std::to_string(speeds_.size()) + " ranks)");
  }
  if (!std::isfinite(planned_ms) || planned_ms < 0) {
    throw InvalidArgument("speed tracker: rank " + std::to_string(rank) + "'s planned cost must be a finite number "
                          ">= 0 ms, got " + std::to_string(planned_ms));
  }
  if (!std::isfinite(measured_ms) || measured_ms < 0 || (measured_ms == 0 && planned_ms > 0)) {
    throw InvalidArgument("speed tracker: rank " + std::to_string(rank) + "'s measured time must be a finite number "
                          "> 0 ms (>= 0 for a rank that ran nothing), got " + std::to_string(measured_ms));
  }
  if (planned_ms == 0) return;
  const double observed = planned_ms / measured_ms;
  if (!std::isfinite(observed) || observed <= 0) {  // e.g. 1e-300 ms planned over 1e300 ms measured
    throw InvalidArgument("speed tracker: rank " + std::to_string(rank) + "'s planned and measured times give no "
                          "usable speed (" + std::to_string(planned_ms) + " / " + std::to_string(measured_ms) + ")");
  }
  double& speed = speeds_[rank];
  speed = reported_[rank] ? std::pow(speed, 1 - weight_) * std::pow(observed, weight_) : observed;
  reported_[rank] = true;
}

}  // namespace hdp::mesh
