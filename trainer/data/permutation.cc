#include "trainer/data/permutation.h"

#include <xxhash.h>

#include <algorithm>
#include <array>
#include <bit>
#include <string>

#include "common/error.h"
#include "trainer/data/mix.h"

namespace hdp::trainer::data {

KeyedPermutation::KeyedPermutation(std::uint64_t key, std::uint64_t count) : count_(count) {
  if (count == 0) throw InvalidArgument("keyed permutation: count must be >= 1");
  // 2h bits, 2h >= bit_width(count - 1): 2^(2h) >= count, and 2^(2h) <= 4 * count.
  const int bits = std::max(2, static_cast<int>(std::bit_width(count - 1)));
  half_bits_ = (bits + 1) / 2;
  half_mask_ = (std::uint64_t{1} << half_bits_) - 1;
  for (int r = 0; r < kRounds; ++r) round_keys_[static_cast<std::size_t>(r)] = mix(key, static_cast<std::uint64_t>(r));
}

std::uint64_t KeyedPermutation::encrypt(std::uint64_t x) const {
  std::uint64_t left = x >> half_bits_, right = x & half_mask_;
  for (const std::uint64_t round_key : round_keys_) {
    std::array<unsigned char, 8> bytes{};  // little-endian whatever the host's order
    for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(right >> (8 * i));
    const std::uint64_t f = XXH3_64bits_withSeed(bytes.data(), bytes.size(), round_key) & half_mask_;
    const std::uint64_t next_right = left ^ f;
    left = right;
    right = next_right;
  }
  return (left << half_bits_) | right;
}

std::uint64_t KeyedPermutation::operator()(std::uint64_t index) const {
  if (index >= count_) {
    throw InvalidArgument("keyed permutation: index " + std::to_string(index) + " of a permutation of " +
                          std::to_string(count_));
  }
  std::uint64_t x = encrypt(index);
  while (x >= count_) x = encrypt(x);
  return x;
}

}  // namespace hdp::trainer::data
