#include "mesh/plan/speed_tracker.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/error.h"
#include "common/median.h"

namespace hdp::mesh {
namespace {

double window_median(const SpeedRecord& r) {
  std::vector<double> seen;
  for (double x : r.recent) {
    if (x > 0) seen.push_back(x);
  }
  return seen.empty() ? 0 : median(std::move(seen));
}

}  // namespace

SpeedTracker::SpeedTracker(SpeedOptions options) : options_(options) {
  if (!(options.band >= 0 && std::isfinite(options.band))) {
    throw InvalidArgument("speed tracker: band must be a finite number >= 0, got " + std::to_string(options.band));
  }
  set_slow_below(options.slow_below);
}

void SpeedTracker::set_slow_below(double slow_below) {
  if (!(slow_below > 0 && slow_below < 1)) {
    throw InvalidArgument("speed tracker: slow_below must be in (0, 1), got " + std::to_string(slow_below));
  }
  options_.slow_below = slow_below;
}

void SpeedTracker::report(const std::string& worker, double planned_ms, double measured_ms) {
  if (!std::isfinite(planned_ms) || planned_ms < 0) {
    throw InvalidArgument("speed tracker: " + worker + "'s planned cost must be a finite number >= 0 ms, got " +
                          std::to_string(planned_ms));
  }
  if (!std::isfinite(measured_ms) || measured_ms < 0 || (measured_ms == 0 && planned_ms > 0)) {
    throw InvalidArgument("speed tracker: " + worker + "'s measured time must be a finite number > 0 ms (>= 0 for a "
                          "worker that ran nothing), got " + std::to_string(measured_ms));
  }
  if (planned_ms == 0) return;
  const double observed = planned_ms / measured_ms;
  if (!std::isfinite(observed) || observed <= 0) {  // e.g. 1e-300 ms planned over 1e300 ms measured
    throw InvalidArgument("speed tracker: " + worker + "'s planned and measured times give no usable speed (" +
                          std::to_string(planned_ms) + " / " + std::to_string(measured_ms) + ")");
  }
  SpeedRecord& r = records_[worker];
  std::rotate(r.recent.begin(), r.recent.begin() + 1, r.recent.end());
  r.recent.back() = observed;
}

std::vector<double> SpeedTracker::end_step(std::span<const std::string> workers) {
  std::vector<double> filtered(workers.size(), 0.0);
  std::vector<double> measured;
  for (std::size_t i = 0; i < workers.size(); ++i) {
    filtered[i] = this->filtered(workers[i]);
    if (filtered[i] > 0) measured.push_back(filtered[i]);
  }
  const double middle = measured.empty() ? 1.0 : median(measured);
  std::vector<double> relative(workers.size(), 1.0);
  for (std::size_t i = 0; i < workers.size(); ++i) {
    if (filtered[i] == 0) continue;
    SpeedRecord& r = records_[workers[i]];
    if (r.planned == 0 || std::abs(filtered[i] / r.planned - 1) > options_.band) r.planned = filtered[i];
    relative[i] = filtered[i] / middle;
    r.strikes = relative[i] < options_.slow_below ? r.strikes + 1 : 0;
  }
  return relative;
}

std::vector<double> SpeedTracker::plan_speeds(std::span<const std::string> workers) const {
  std::vector<double> speeds(workers.size(), 0.0);
  std::vector<double> known;
  for (std::size_t i = 0; i < workers.size(); ++i) {
    auto it = records_.find(workers[i]);
    if (it != records_.end() && it->second.planned > 0) {
      speeds[i] = it->second.planned;
      known.push_back(speeds[i]);
    }
  }
  const double guess = known.empty() ? 1.0 : median(known);
  for (double& s : speeds) {
    if (s == 0) s = guess;
  }
  return speeds;
}

double SpeedTracker::filtered(const std::string& worker) const {
  auto it = records_.find(worker);
  return it == records_.end() ? 0 : window_median(it->second);
}

std::int64_t SpeedTracker::strikes(const std::string& worker) const {
  auto it = records_.find(worker);
  return it == records_.end() ? 0 : static_cast<std::int64_t>(it->second.strikes);
}

SpeedRecord SpeedTracker::record(const std::string& worker) const {
  auto it = records_.find(worker);
  return it == records_.end() ? SpeedRecord{} : it->second;
}

void SpeedTracker::restore(const std::string& worker, const SpeedRecord& record) {
  auto ok = [](double x) { return std::isfinite(x) && x >= 0; };
  const bool valid = std::all_of(record.recent.begin(), record.recent.end(), ok) && ok(record.planned) &&
                     ok(record.strikes) && record.strikes == std::floor(record.strikes);
  if (!valid) throw InvalidArgument("speed tracker: " + worker + "'s record holds a number that is not finite and >= 0");
  records_[worker] = record;
}

}  // namespace hdp::mesh
