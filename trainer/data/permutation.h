// File: trainer/data/permutation.h
//
// A permutation of [0, count) that is computed index by index and stored nowhere: a balanced
// Feistel network over the smallest even number of bits that holds count - 1, its round function
// xxh3-64 seeded with a key of the round, and cycle walking (an output >= count is encrypted again
// until it falls inside; every cycle through an index inside holds it, so the walk ends). The
// domain is at most 4 * count, so a lookup takes at most four passes on average.
//
// What it replaces: a Fisher-Yates shuffle of the whole epoch, 8 bytes a piece held per worker
// and computed before the epoch's first step (62 ms of a core at a million pieces,
// bench_data_order; at the billions of pieces of a pre-training corpus, gigabytes and minutes, in every worker that
// starts or restarts and at every epoch's boundary). Here construction is a few multiplications
// and a lookup at most 6 short hashes a pass (about 120 ns at a million pieces).
//
// The order is a fixed function of (key, count): xxh3 (stable from libxxhash 0.8.0, which the build
// requires) and the Feistel network are defined bit by bit, so every process built from this
// source visits the same order. It is a well-mixed order, not a uniform draw over all orders: a
// Feistel network of more than one bit a half gives only even permutations of its domain.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace hdp::trainer::data {

// The name of the data's orders: this permutation (the network, its rounds, its round function,
// the bytes it hashes, the domain's width) and how their keys are derived (batch_source.cc's
// mix(seed, epoch), blend.cc's salted keys). What depends on the order names it (the fingerprint a
// checkpoint records, a blend's fingerprint), so a change of any of it must change the name, and
// a position saved under the old order is then not read under the new one.
inline constexpr std::string_view kOrderScheme = "feistel6-xxh3";

class KeyedPermutation {
 public:
  static constexpr int kRounds = 6;

  // count >= 1 (InvalidArgument otherwise).
  KeyedPermutation(std::uint64_t key, std::uint64_t count);

  std::uint64_t count() const { return count_; }
  // The image of `index` (< count(): InvalidArgument otherwise), itself < count().
  std::uint64_t operator()(std::uint64_t index) const;

 private:
  std::uint64_t encrypt(std::uint64_t x) const;

  std::uint64_t count_;
  int half_bits_;
  std::uint64_t half_mask_;
  std::array<std::uint64_t, kRounds> round_keys_;
};

}  // namespace hdp::trainer::data
