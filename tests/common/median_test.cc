// The median of odd and even samples in any order, and an empty sample refused.
#include <gtest/gtest.h>

#include "common/error.h"
#include "common/median.h"

namespace hdp {
namespace {

TEST(Median, MiddleValueOfAnOddSample) {
  EXPECT_EQ(median({7.0}), 7.0);
  EXPECT_EQ(median({9.0, 1.0, 5.0}), 5.0);
  EXPECT_EQ(median({3.0, 3.0, 1.0, 8.0, 3.0}), 3.0);
}

TEST(Median, MeanOfTheTwoMiddleValuesOfAnEvenSample) {
  EXPECT_EQ(median({4.0, 1.0}), 2.5);
  EXPECT_EQ(median({10.0, 2.0, 6.0, 4.0}), 5.0);  // sorted 2 4 6 10
  EXPECT_EQ(median({-1.0, 100.0, 0.0, 1.0, 2.0, -50.0}), 0.5);
}

TEST(Median, EmptySampleIsRefused) { EXPECT_THROW(median({}), InvariantViolation); }

}  // namespace
}  // namespace hdp
