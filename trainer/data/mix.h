// File: trainer/data/mix.h
//
// Bit mixing for the data module: SplitMix64's finalizer, a fixed function of its input, so every
// process built from this source derives the same values from the same seed: the keys of the
// epoch orders, of a blend's permutations and of the permutation's rounds, and the synthetic
// tokens, do not depend on the compiler or the host.
#pragma once

#include <cstdint>

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

}  // namespace hdp::trainer::data
