// The learning-rate schedule: warm-up, cosine decay, the floor, and the configurations refused.
#include "trainer/lr_schedule.h"

#include <gtest/gtest.h>

namespace hdp::trainer {
namespace {

TEST(LrSchedule, WarmsUpLinearlyThenDecaysAlongACosineToTheFloor) {
  const LrSchedule s{.peak = 1e-3, .min = 1e-4, .warmup = 10, .total = 110};
  EXPECT_DOUBLE_EQ(s.at(1), 1e-4);
  EXPECT_DOUBLE_EQ(s.at(5), 5e-4);
  EXPECT_DOUBLE_EQ(s.at(10), 1e-3);
  EXPECT_NEAR(s.at(60), 5.5e-4, 1e-15);  // half-way through the decay: the mean of peak and floor
  EXPECT_NEAR(s.at(110), 1e-4, 1e-15);
  EXPECT_DOUBLE_EQ(s.at(111), 1e-4);
  EXPECT_DOUBLE_EQ(s.at(100000), 1e-4);
  for (std::int64_t t = 11; t <= 110; ++t) EXPECT_LE(s.at(t), s.at(t - 1)) << "step " << t;
}

TEST(LrSchedule, NoWarmupStartsAtThePeak) {
  const LrSchedule s{.peak = 2e-4, .min = 0, .warmup = 0, .total = 100};
  EXPECT_DOUBLE_EQ(s.at(0), 2e-4);
  // Step 1 is the first step of the decay: 1/100 of the way along the cosine.
  EXPECT_DOUBLE_EQ(s.at(1), 2e-4 * 0.5 * (1 + std::cos(std::numbers::pi / 100)));
  EXPECT_NEAR(s.at(100), 0, 1e-18);
}

TEST(LrSchedule, ImpossibleSchedulesAreRefusedNamingTheValue) {
  auto refused = [](LrSchedule s, const std::string& flag) {
    try {
      s.validate();
      ADD_FAILURE() << "accepted " << flag;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(flag), std::string::npos) << e.what();
    }
  };
  refused({.peak = 0}, "--lr");
  refused({.peak = std::nan("")}, "--lr");
  refused({.peak = 1e-4, .min = 1e-3}, "--min-lr");
  refused({.peak = 1e-4, .min = -1}, "--min-lr");
  refused({.warmup = 20, .total = 10}, "--warmup-steps");
  refused({.warmup = -1}, "--warmup-steps");
  EXPECT_NO_THROW(LrSchedule{}.validate());
}

}  // namespace
}  // namespace hdp::trainer
