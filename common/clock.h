// File: common/clock.h
//
// Milliseconds on the steady clock, as the data plane and the benchmarks report durations.
#pragma once

#include <chrono>

namespace hdp {

using SteadyClock = std::chrono::steady_clock;

inline double ms_between(SteadyClock::time_point start, SteadyClock::time_point end) {
  return std::chrono::duration<double, std::milli>(end - start).count();
}
inline double ms_since(SteadyClock::time_point start) { return ms_between(start, SteadyClock::now()); }

}  // namespace hdp
