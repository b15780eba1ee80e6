// File: trainer/data/mix.h
//
// Bit mixing for the data module: SplitMix64's finalizer, and an unbiased draw in [0, n) from
// std::mt19937_64. Both are fixed functions of their inputs (no std distribution, whose output the
// C++ standard leaves to the library), so every process built from this source draws the same
// values: the epoch orders' keys, a blend's permutations and the synthetic tokens do not depend on
// the compiler or the host.
#pragma once

#include <cstdint>
#include <random>

namespace hdp::trainer::data {

// SplitMix64 (Steele, Lea, Flood 2014): the output for state `x`, i.e. the finalizer applied to
// x + golden ratio. Consecutive inputs give unrelated outputs.
constexpr std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// One 64-bit value from two, e.g. (seed, epoch); not symmetric: mix(a, b) != mix(b, a) in general.
constexpr std::uint64_t mix(std::uint64_t a, std::uint64_t b) { return splitmix64(a ^ splitmix64(b)); }

// A uniform integer in [0, n), n >= 1, by rejection: draws below 2^64 mod n are redrawn, so every
// value has exactly (2^64 - 2^64 mod n) / n preimages. Consumes one draw almost always.
inline std::uint64_t uniform_below(std::mt19937_64& rng, std::uint64_t n) {
  const std::uint64_t threshold = (0 - n) % n;  // 2^64 mod n
  for (;;) {
    const std::uint64_t x = rng();
    if (x >= threshold) return x % n;
  }
}

}  // namespace hdp::trainer::data
