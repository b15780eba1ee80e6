#include "elastic/backoff.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace hdp::elastic {

Backoff::Backoff(BackoffOptions options, std::uint64_t seed) : options_(options), rng_(seed) {
  if (options_.initial.count() <= 0) throw InvalidArgument("backoff: initial interval must be > 0 ms");
  if (options_.max < options_.initial) throw InvalidArgument("backoff: max interval must be >= initial interval");
  if (!(options_.multiplier >= 1.0)) throw InvalidArgument("backoff: multiplier must be >= 1");
  if (!(options_.jitter >= 0.0 && options_.jitter <= 1.0)) throw InvalidArgument("backoff: jitter must be in [0, 1]");
}

std::chrono::milliseconds Backoff::next() {
  const double max_ms = static_cast<double>(options_.max.count());
  // pow() may overflow to inf for large attempt counts; min() clamps it back to max.
  double interval = std::min(max_ms, options_.initial.count() * std::pow(options_.multiplier, attempt_));
  if (options_.jitter > 0.0) {
    std::uniform_real_distribution<double> spread(1.0 - options_.jitter, 1.0 + options_.jitter);
    interval = std::min(max_ms, interval * spread(rng_));
  }
  ++attempt_;
  return std::chrono::milliseconds(std::max<std::int64_t>(1, std::llround(interval)));
}

}  // namespace hdp::elastic
