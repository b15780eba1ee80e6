// File: trainer/data/permutation.h
//
// A permutation of [0, count) that is computed index by index and stored nowhere: a balanced
// Feistel network over the smallest even number of bits that holds count - 1, its round function
// xxh3-64 seeded with a key of the round, and cycle walking (an output >= count is encrypted again
// until it falls inside; every cycle through an index inside holds it, so the walk ends). The
// domain is under 4 * count, so a lookup takes fewer than four passes on average.
//
// What it replaces: a Fisher-Yates shuffle of the whole epoch, 8 bytes a piece held per worker
// and computed before the epoch's first step (30 ms of a core at a million pieces; at the billions
// of pieces of a pre-training corpus, gigabytes and minutes, in every worker that starts or
// restarts and at every epoch's boundary). Here construction is a few multiplications and a
// lookup costs about 6 * 4 short hashes.
//
// The order is a fixed function of (key, count): xxh3 and the Feistel network are defined bit by
// bit, so every process built from this source visits the same order.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace hdp::trainer::data {

// The name of this permutation (network, rounds, round function). What the data's order depends
// on names it (the fingerprint a checkpoint records, a blend's fingerprint), so that a change of it
// changes the name and a position saved under the old order is not read under the new one.
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

  std::uint64_t count_ = 1;
  int half_bits_ = 1;
  std::uint64_t half_mask_ = 1;
  std::array<std::uint64_t, kRounds> round_keys_{};
};

}  // namespace hdp::trainer::data
