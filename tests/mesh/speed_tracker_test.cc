// Speed factors from measured step times: the arithmetic of one report, what an idle rank and bad
// input do, and the loop it closes with the planner (a rank that runs at half speed gets about half
// the work from its second step on, and the step gets shorter).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "common/error.h"
#include "mesh/speed_tracker.h"
#include "tests/mesh/plan_test_support.h"

namespace hdp::mesh {
namespace {

TEST(SpeedTracker, FirstReportReplacesTheCalibratedSpeedThenBlendsGeometrically) {
  SpeedTracker tracker(2, 0.5);
  EXPECT_EQ(tracker.speeds()[0], 1.0);
  tracker.report(0, 900, 1000);  // 10% slower than calibrated
  EXPECT_DOUBLE_EQ(tracker.speeds()[0], 0.9);
  tracker.report(0, 400, 1000);  // observed 0.4: halfway in log space, sqrt(0.9 * 0.4)
  EXPECT_DOUBLE_EQ(tracker.speeds()[0], 0.6);
  EXPECT_EQ(tracker.speeds()[1], 1.0);  // untouched by rank 0's reports
}

TEST(SpeedTracker, HalvingAndDoublingMoveTheSpeedAlike) {
  SpeedTracker slower(1, 0.25);
  SpeedTracker faster(1, 0.25);
  slower.report(0, 100, 100);
  faster.report(0, 100, 100);
  slower.report(0, 100, 200);
  faster.report(0, 200, 100);
  EXPECT_NEAR(std::log(slower.speeds()[0]), -std::log(faster.speeds()[0]), 1e-12);
  EXPECT_NEAR(slower.speeds()[0], std::pow(0.5, 0.25), 1e-12);
}

TEST(SpeedTracker, WeightOneFollowsTheLastStepAlone) {
  SpeedTracker tracker(1, 1.0);
  tracker.report(0, 100, 50);
  tracker.report(0, 100, 125);
  EXPECT_DOUBLE_EQ(tracker.speeds()[0], 0.8);
}

TEST(SpeedTracker, AnIdleStepSaysNothing) {
  SpeedTracker tracker(1, 0.5);
  tracker.report(0, 0, 3);  // ran nothing, yet the step took 3 ms (waiting on rings)
  EXPECT_EQ(tracker.speeds()[0], 1.0);
  tracker.report(0, 0, 0);  // ran nothing and took no time
  EXPECT_EQ(tracker.speeds()[0], 1.0);
  tracker.report(0, 50, 100);  // still the first real report: replaces 1
  EXPECT_DOUBLE_EQ(tracker.speeds()[0], 0.5);
}

TEST(SpeedTracker, BadInputIsRejectedAndLeavesTheSpeedsAlone) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_THROW(SpeedTracker(0, 0.5), InvalidArgument);
  for (double weight : {0.0, -0.5, 1.5, nan}) EXPECT_THROW(SpeedTracker(1, weight), InvalidArgument) << weight;

  SpeedTracker tracker(2, 0.5);
  const auto message = [&](std::size_t rank, double planned, double measured) -> std::string {
    try {
      tracker.report(rank, planned, measured);
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "(no error)";
  };
  EXPECT_NE(message(2, 10, 10).find("rank 2 out of range (2 ranks)"), std::string::npos);
  EXPECT_NE(message(1, -1, 10).find("planned cost"), std::string::npos);
  EXPECT_NE(message(1, nan, 10).find("planned cost"), std::string::npos);
  EXPECT_NE(message(1, inf, 10).find("planned cost"), std::string::npos);
  EXPECT_NE(message(1, 10, 0).find("measured time"), std::string::npos);
  EXPECT_NE(message(1, 0, -1).find("measured time"), std::string::npos);
  EXPECT_NE(message(1, 0, nan).find("measured time"), std::string::npos);
  EXPECT_NE(message(1, 10, -5).find("measured time"), std::string::npos);
  EXPECT_NE(message(1, 10, nan).find("measured time"), std::string::npos);
  EXPECT_NE(message(1, 10, inf).find("measured time"), std::string::npos);
  EXPECT_NE(message(1, 1e-300, 1e300).find("no usable speed"), std::string::npos);
  EXPECT_EQ(tracker.speeds()[0], 1.0);
  EXPECT_EQ(tracker.speeds()[1], 1.0);
}

// A simulated cluster of 32 ranks where rank 5 really runs at half speed: step 1 is planned at the
// calibrated speeds (all 1), so rank 5 takes about twice as long as the rest; after its report the
// next plan gives it 45-55% of an equal rank's work (the planner's own tolerance on a large batch,
// see balance_strategy_test) and the step is at least 1.6x shorter (ideally 2x, less the few % of
// granularity in the last sequences on each side).
TEST(SpeedTracker, ClosesTheLoopWithThePlanner) {
  constexpr std::uint32_t kRanks = 32;
  constexpr std::uint32_t kSlow = 5;
  const auto true_speed = [](std::uint32_t r) { return r == kSlow ? 0.5 : 1.0; };
  SpeedTracker tracker(kRanks, 0.5);
  double steps_ms[2] = {};
  double slow_share = 0;
  for (int step = 0; step < 2; ++step) {
    auto request = test::drawn_request("github", 32768, 4 << 20, 20 + step, kRanks);
    request.speeds.assign(tracker.speeds().begin(), tracker.speeds().end());
    const Plan plan = make_plan(request, Strategy::kBalanced);
    double others = 0;
    for (std::uint32_t r = 0; r < kRanks; ++r) {
      const double work = test::rank_work_ms(request, plan, r);
      const double measured = work / true_speed(r);
      steps_ms[step] = std::max(steps_ms[step], measured);
      if (r != kSlow) others += work;
      tracker.report(r, work, measured);
    }
    slow_share = test::rank_work_ms(request, plan, kSlow) / (others / (kRanks - 1));
  }
  EXPECT_DOUBLE_EQ(tracker.speeds()[kSlow], 0.5);
  EXPECT_DOUBLE_EQ(tracker.speeds()[0], 1.0);
  EXPECT_GE(slow_share, 0.45);
  EXPECT_LE(slow_share, 0.55);
  EXPECT_GT(steps_ms[0] / steps_ms[1], 1.6) << steps_ms[0] << " ms then " << steps_ms[1] << " ms";
}

}  // namespace
}  // namespace hdp::mesh
