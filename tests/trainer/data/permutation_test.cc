// KeyedPermutation (trainer/data/permutation.h): a bijection of [0, count) for every count, small
// ones exhaustively and across the Feistel domain's edges; distinct keys give distinct orders;
// lookups stay in range and distinct at counts no table could hold; bad arguments are refused.
// (As a shuffle, each position holding each element about equally often over the epochs' keys:
// batch_source_test.cc, EpochOrderIsAPinnedSeededPermutation.)
#include "trainer/data/permutation.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <set>
#include <vector>

#include "common/error.h"

namespace hdp::trainer::data {
namespace {

std::vector<std::uint64_t> table(const KeyedPermutation& p) {
  std::vector<std::uint64_t> out(p.count());
  for (std::uint64_t i = 0; i < p.count(); ++i) out[i] = p(i);
  return out;
}

bool is_permutation_of_range(std::vector<std::uint64_t> values) {
  std::sort(values.begin(), values.end());
  for (std::uint64_t i = 0; i < values.size(); ++i) {
    if (values[i] != i) return false;
  }
  return true;
}

TEST(KeyedPermutation, EveryCountGivesABijection) {
  for (std::uint64_t n = 1; n <= 300; ++n) {
    for (std::uint64_t key : {0ull, 1ull, 0x9e3779b97f4a7c15ull}) {
      EXPECT_TRUE(is_permutation_of_range(table(KeyedPermutation(key, n)))) << "count " << n << ", key " << key;
    }
  }
  // Around the powers of four (where the domain's width changes) and one of a million.
  for (std::uint64_t n : {1023ull, 1024ull, 1025ull, 4095ull, 4096ull, 4097ull, 65537ull, 1'000'003ull}) {
    EXPECT_TRUE(is_permutation_of_range(table(KeyedPermutation(42, n)))) << "count " << n;
  }
}

TEST(KeyedPermutation, KeysGiveDifferentOrdersAndTheSameKeyTheSame) {
  EXPECT_EQ(table(KeyedPermutation(3, 1000)), table(KeyedPermutation(3, 1000)));
  EXPECT_NE(table(KeyedPermutation(3, 1000)), table(KeyedPermutation(4, 1000)));
  // Not the identity, nor close to it: few fixed points (a random permutation has one on average).
  const std::vector<std::uint64_t> order = table(KeyedPermutation(3, 100000));
  int fixed = 0;
  for (std::uint64_t i = 0; i < order.size(); ++i) fixed += order[i] == i;
  EXPECT_LT(fixed, 10);
}

TEST(KeyedPermutation, HugeCountsAreLookedUpWithoutATable) {
  const std::uint64_t counts[] = {1'000'000'000'000, (std::uint64_t{1} << 62) + 3,
                                  std::numeric_limits<std::uint64_t>::max()};
  for (const std::uint64_t n : counts) {
    const KeyedPermutation p(11, n);
    std::set<std::uint64_t> images;
    for (std::uint64_t i = 0; i < 1000; ++i) {
      const std::uint64_t at = i * (n / 1000);
      const std::uint64_t image = p(at);
      EXPECT_LT(image, n);
      images.insert(image);
    }
    images.insert(p(n - 1));
    EXPECT_EQ(images.size(), 1001u) << "count " << n;
  }
}

TEST(KeyedPermutation, RefusesAnEmptyRangeAndAnIndexOutsideIt) {
  EXPECT_THROW(KeyedPermutation(1, 0), InvalidArgument);
  const KeyedPermutation p(1, 10);
  EXPECT_THROW(p(10), InvalidArgument);
  EXPECT_EQ(KeyedPermutation(1, 1)(0), 0u);
}

}  // namespace
}  // namespace hdp::trainer::data
