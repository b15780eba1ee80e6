// File: tests/support/seeded_faults.h
//
// What the seeded fault-sequence tests share: the seeds to run (HDP_CONVERGENCE_SEEDS=3,17 picks
// them, else the test's defaults) and a uniform draw of an integer or a std::chrono duration.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

namespace hdp::test {

inline std::vector<int> convergence_seeds(std::vector<int> defaults) {
  const char* chosen = std::getenv("HDP_CONVERGENCE_SEEDS");
  if (!chosen) return defaults;
  std::vector<int> list;
  std::stringstream text(chosen);
  for (std::string item; std::getline(text, item, ',');) {
    if (!item.empty()) list.push_back(std::stoi(item));
  }
  return list;
}

// A value in [low, high]: an integer, or a duration (drawn in its own ticks).
template <typename T, typename Rng>
T draw_uniform(Rng& rng, T low, T high) {
  if constexpr (std::is_integral_v<T>) {
    return std::uniform_int_distribution<T>(low, high)(rng);
  } else {
    return T(std::uniform_int_distribution<std::int64_t>(low.count(), high.count())(rng));
  }
}

}  // namespace hdp::test
