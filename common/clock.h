// File: common/clock.h
//
// Milliseconds on the steady clock, as the data plane and the benchmarks report durations.
#pragma once

#include <chrono>

namespace hdp {

using SteadyClock = std::chrono::steady_clock;

inline double ms_since(SteadyClock::time_point start) {
  return std::chrono::duration<double, std::milli>(SteadyClock::now() - start).count();
}

}  // namespace hdp
