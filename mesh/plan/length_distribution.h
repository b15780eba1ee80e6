// File: mesh/plan/length_distribution.h
//
// Sequence-length distributions for the simulator, the tests and `hdp plan`: a mixture of bins, each
// drawn log-uniformly in [lo, hi] (lo == hi: a point mass), with lengths cut at the context length as
// a training pipeline truncates documents. docs/scheduler.md explains how `github` and `byted` were
// fitted to ByteScale's published token shares.
//
// Draws use std::mt19937_64 (its output is fixed by the C++ standard) and no std distribution
// (whose output is not), so a seed gives the same batch in every process built from this source.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace hdp::mesh {

struct LengthBin {
  std::int64_t lo = 1;
  std::int64_t hi = 1;
  double weight = 0;  // relative probability of the bin
};

class LengthDistribution {
 public:
  // Throws InvalidArgument naming the bin when lo < 1, hi < lo or the weight is not finite and > 0.
  LengthDistribution(std::string name, std::vector<LengthBin> bins);

  const std::string& name() const { return name_; }
  // One length in [1, context].
  std::int64_t sample(std::mt19937_64& rng, std::int64_t context) const;

 private:
  std::string name_;
  std::vector<LengthBin> bins_;
  std::vector<double> cumulative_;  // running sum of the weights, normalised to end at 1
};

// "github", "byted", or "file:PATH" (the empirical distribution of the lengths in PATH). Throws
// InvalidArgument naming an unknown name.
LengthDistribution named_distribution(std::string_view spec);

// Lengths from a text file: integers >= 0 separated by white space; '#' starts a comment. Throws
// InvalidArgument naming the file (and the line) when it cannot be read, holds something else, or
// holds no length at all.
std::vector<std::int64_t> read_lengths(const std::string& path);

// Draws sequences until they hold exactly `tokens` tokens (the last one is cut to fit), each at most
// `context` long. Throws InvalidArgument when tokens or context is < 1.
std::vector<std::int64_t> draw_batch(const LengthDistribution& distribution, std::int64_t context,
                                     std::int64_t tokens, std::uint64_t seed);

}  // namespace hdp::mesh
