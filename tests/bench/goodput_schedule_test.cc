// bench_goodput's failure schedule and its ETTR arithmetic (bench/goodput_schedule.h).
#include "bench/goodput_schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <stdexcept>

namespace hdp::bench {
namespace {

TEST(GoodputSchedule, TheSameSeedGivesTheSameScheduleAndAnotherSeedAnother) {
  ScheduleOptions o{.mtbf_s = 30, .horizon_s = 3000, .seed = 7};
  const auto a = make_schedule(o), b = make_schedule(o);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].at_s, b[i].at_s);
    EXPECT_EQ(a[i].kind, b[i].kind);
    EXPECT_EQ(a[i].pick, b[i].pick);
    EXPECT_EQ(a[i].duration_s, b[i].duration_s);
  }
  o.seed = 8;
  const auto c = make_schedule(o);
  ASSERT_FALSE(c.empty());
  EXPECT_NE(a.front().at_s, c.front().at_s);
}

// Inter-arrival times of mean MTBF: over 20,000 faults the mean gap is within 3% of it (the
// standard error of an exponential's mean over n draws is mtbf / sqrt(n): 0.7%), and so is the
// standard deviation (an exponential's equals its mean; a fixed period would give 0).
TEST(GoodputSchedule, GapsAreExponentialWithTheMeanAsked) {
  const double mtbf = 30;
  const auto faults = make_schedule({.mtbf_s = mtbf, .horizon_s = 600000, .seed = 3, .max_spares = 1000000});
  ASSERT_GT(faults.size(), 15000u);
  double sum = 0, sq = 0, previous = 0;
  for (const Fault& f : faults) {
    const double gap = f.at_s - previous;
    EXPECT_GT(gap, 0);
    sum += gap;
    sq += gap * gap;
    previous = f.at_s;
  }
  const double n = static_cast<double>(faults.size()), mean = sum / n;
  EXPECT_NEAR(mean, mtbf, 0.03 * mtbf);
  EXPECT_NEAR(std::sqrt(sq / n - mean * mean), mtbf, 0.03 * mtbf);
  EXPECT_LT(faults.back().at_s, 600000);
}

// Every kind asked for is drawn about equally often (1/6 each within 2 points over 20,000), each
// fault's pick is in [0, 1), and only stalls carry a duration, within the range asked for.
TEST(GoodputSchedule, KindsAreDrawnEvenlyAndStallsLastWithinTheirRange) {
  const auto faults =
      make_schedule({.mtbf_s = 1, .horizon_s = 20000, .seed = 11, .max_spares = 1000000, .min_stop_s = 2, .max_stop_s = 5});
  std::map<FaultKind, int> count;
  for (const Fault& f : faults) {
    ++count[f.kind];
    EXPECT_GE(f.pick, 0);
    EXPECT_LT(f.pick, 1);
    if (f.kind == FaultKind::kNodeStop || f.kind == FaultKind::kRedisStall) {
      EXPECT_GE(f.duration_s, 2);
      EXPECT_LE(f.duration_s, 5);
    } else {
      EXPECT_EQ(f.duration_s, 0);
    }
  }
  ASSERT_EQ(count.size(), 6u);
  for (const auto& [kind, n] : count) EXPECT_NEAR(n / double(faults.size()), 1.0 / 6, 0.02) << kind_name(kind);
}

TEST(GoodputSchedule, SpareJoinsStopAtTheCapAndKindsCanBeRestricted) {
  const auto faults = make_schedule({.mtbf_s = 1, .horizon_s = 2000, .seed = 5, .max_spares = 2});
  int spares = 0;
  for (const Fault& f : faults) spares += f.kind == FaultKind::kSpareJoin;
  EXPECT_EQ(spares, 2);
  const auto kills = make_schedule({.mtbf_s = 1, .horizon_s = 200, .seed = 5, .kinds = {FaultKind::kNodeKill}});
  ASSERT_FALSE(kills.empty());
  for (const Fault& f : kills) EXPECT_EQ(f.kind, FaultKind::kNodeKill);
  // torchrun's share of a schedule: its node kills, at the same times.
  const auto only = only_kinds(faults, {FaultKind::kNodeKill});
  std::set<double> times;
  for (const Fault& f : faults) {
    if (f.kind == FaultKind::kNodeKill) times.insert(f.at_s);
  }
  ASSERT_EQ(only.size(), times.size());
  for (const Fault& f : only) EXPECT_TRUE(times.contains(f.at_s));
}

TEST(GoodputSchedule, BadOptionsAreRefusedAndNamesRoundTrip) {
  EXPECT_THROW(make_schedule({.mtbf_s = 0}), std::invalid_argument);
  EXPECT_THROW(make_schedule({.mtbf_s = 10, .kinds = {}}), std::invalid_argument);
  EXPECT_THROW(make_schedule({.mtbf_s = 10, .min_stop_s = 3, .max_stop_s = 2}), std::invalid_argument);
  for (FaultKind k : all_kinds()) EXPECT_EQ(kind_from_name(kind_name(k)), k);
  EXPECT_FALSE(kind_from_name("reboot").has_value());
  EXPECT_EQ(pick_index(0, 4), 0);
  EXPECT_EQ(pick_index(0.2499, 4), 0);
  EXPECT_EQ(pick_index(0.25, 4), 1);
  EXPECT_EQ(pick_index(0.999999, 4), 3);
}

// A fault-free run of 10 steps of 100 ms: ETTR 1. The same steps with a 1 s pause and steps 5..6
// computed twice: productive 1 s (the fault-free steps 1..10), wall 1 + 1 + 0.2 s.
TEST(GoodputEttr, LostTimeAndRecomputedStepsLowerTheRatio) {
  std::map<std::int64_t, double> fault_free;
  std::vector<StepTime> clean;
  for (std::int64_t s = 1; s <= 10; ++s) {
    fault_free[s] = 100;
    clean.push_back({s, 1000 + 100 * s, 100});
  }
  const RunGoodput a = run_goodput(clean, fault_free);
  EXPECT_EQ(a.last_step, 10);
  EXPECT_EQ(a.recomputed_steps, 0);
  EXPECT_DOUBLE_EQ(a.wall_ms, 1000);
  EXPECT_DOUBLE_EQ(a.ettr, 1);

  std::vector<StepTime> faulted;
  std::int64_t t = 1000;
  for (std::int64_t s : {1, 2, 3, 4, 5, 6, 5, 6, 7, 8, 9, 10}) {
    t += 100;
    if (s == 5 && t > 1600) t += 1000;  // the pause before the redo
    faulted.push_back({s, t, 100});
  }
  const RunGoodput b = run_goodput(faulted, fault_free);
  EXPECT_EQ(b.recomputed_steps, 2);
  EXPECT_EQ(b.lines, 12);
  EXPECT_DOUBLE_EQ(b.productive_ms, 1000);
  EXPECT_DOUBLE_EQ(b.wall_ms, 2200);
  EXPECT_NEAR(b.ettr, 1000.0 / 2200, 1e-12);
}

// The fault-free run's own step times are what counts, not the faulted run's (slower steps on
// fewer ranks are lost time); a step the fault-free run lacks counts at its median.
TEST(GoodputEttr, ProductiveTimeIsTheFaultFreeRunsAndEmptyRunsAreRefused) {
  const std::map<std::int64_t, double> fault_free = {{1, 50}, {2, 60}, {3, 70}};
  const std::vector<StepTime> slow = {{1, 200, 200}, {2, 400, 200}, {3, 600, 200}, {4, 800, 200}};
  const RunGoodput g = run_goodput(slow, fault_free);
  EXPECT_DOUBLE_EQ(g.productive_ms, 50 + 60 + 70 + 60);
  EXPECT_DOUBLE_EQ(g.wall_ms, 800);
  EXPECT_DOUBLE_EQ(g.ettr, 240.0 / 800);
  EXPECT_THROW(run_goodput({}, fault_free), std::invalid_argument);
  EXPECT_THROW(run_goodput(slow, {}), std::invalid_argument);
}

// A run's own undisturbed steps give its fault-free time: 100 ms steps, the machine twice as slow
// from step 41, and 3 steps of 5 s after a fault at step 20. The slow steps (over 3 times the
// window's median) are left out of the windowed mean; the drift moves it, step by step across the
// change, so that the productive time over the change is what the steps cost.
TEST(GoodputEttr, TheRunsOwnStepTimesIgnoreAFaultsSlowStepsAndFollowTheLoad) {
  std::vector<StepTime> run;
  std::int64_t t = 0;
  for (std::int64_t s = 1; s <= 80; ++s) {
    const double ms = s >= 20 && s < 23 ? 5000 : s > 40 ? 200 : 100;
    t += static_cast<std::int64_t>(ms);
    run.push_back({s, t, ms});
  }
  const auto own = own_step_times(run, 5);
  ASSERT_EQ(own.size(), 80u);
  EXPECT_DOUBLE_EQ(own.at(21), 100);
  EXPECT_DOUBLE_EQ(own.at(10), 100);
  EXPECT_DOUBLE_EQ(own.at(70), 200);
  const RunGoodput g = run_goodput(run, own);
  EXPECT_DOUBLE_EQ(g.wall_ms, 3 * 5000 + 37 * 100 + 40 * 200);
  // Productive: steps 1..40 at 100 ms and 41..80 at 200 ms; the windows across the change see
  // both, the mean's excess before it equal to its deficit after it (steps 20..22 count 100 ms).
  EXPECT_NEAR(g.productive_ms, 40 * 100 + 40 * 200, 1e-6);
  EXPECT_NEAR(own.at(38), (8 * 100 + 3 * 200) / 11.0, 1e-9);
  // 12 s of 26.7 s; the same figure against the first 40 steps' 100 ms would be 8 s.
  EXPECT_NEAR(g.ettr, 12000.0 / 26700, 1e-9);
  EXPECT_TRUE(own_step_times({}, 5).empty());
}

// Step times skewed to the right, as on a shared machine (every fifth step 180 ms, the others
// 100 ms), with no fault: the fault-free time is what the steps cost on average, so the run's ETTR
// is 1. A windowed median (100 ms) would have called 14% of this fault-free run lost.
TEST(GoodputEttr, SkewedStepTimesWithoutAFaultLoseNothing) {
  std::vector<StepTime> run;
  std::int64_t t = 0;
  double sum = 0;
  for (std::int64_t s = 1; s <= 200; ++s) {
    const double ms = s <= kSettlingLines ? 116 : s % 5 == 0 ? 180 : 100;
    t += static_cast<std::int64_t>(ms);
    sum += ms;
    run.push_back({s, t, ms, 1, 4});
  }
  const RunGoodput g = run_goodput(run, own_step_times(run, 50));
  EXPECT_DOUBLE_EQ(g.wall_ms, sum);
  EXPECT_NEAR(g.ettr, 1, 0.01);
  EXPECT_GT(g.ettr, 1.13 * 100 * 200 / sum);
}

// What a fault costs beyond its gap is lost: the first lines of a new generation (and of a new
// world size, or after a step that was computed again) are slow and left out of the estimate,
// so they count at the steps' usual time; the same holds for a restart that resumed at the next
// step, seen by its gap. A generation change with steps at the usual time costs nothing.
TEST(GoodputEttr, TheFirstStepsAfterABreakCountAtTheUsualTime) {
  std::vector<StepTime> run;
  std::int64_t t = 0;
  auto add = [&](std::int64_t step, double ms, std::int64_t generation, int world, double gap = 0) {
    t += static_cast<std::int64_t>(gap + ms);
    run.push_back({step, t, ms, generation, world});
  };
  for (std::int64_t s = 1; s <= 30; ++s) add(s, 100, 1, 4);
  add(31, 400, 2, 3, 500);  // a new generation: 500 ms of gap, then two slow steps
  add(32, 250, 2, 3);
  for (std::int64_t s = 33; s <= 60; ++s) add(s, 100, 2, 3);
  add(61, 300, 2, 3, 1500);  // a restart that resumed at the next step: its gap gives it away
  add(62, 300, 2, 3);
  for (std::int64_t s = 63; s <= 90; ++s) add(s, 100, 2, 3);
  const auto own = own_step_times(run, 10);
  EXPECT_DOUBLE_EQ(own.at(31), 100);
  EXPECT_DOUBLE_EQ(own.at(32), 100);
  EXPECT_DOUBLE_EQ(own.at(61), 100);
  EXPECT_DOUBLE_EQ(own.at(62), 100);
  const RunGoodput g = run_goodput(run, own);
  EXPECT_DOUBLE_EQ(g.productive_ms, 90 * 100);
  EXPECT_DOUBLE_EQ(g.wall_ms, 90 * 100 + 500 + 300 + 150 + 1500 + 400);
}

// A run without faults whose steps time 100 ms inside a loop that adds 4 ms before each (the step
// boundary), and 30 ms more after every 10th step (a checkpoint's stall). By interval, a step
// costs 104 ms: the loop is part of every step, and the 29 stalls (after steps 10..290) are lost
// time. By the step's own timer, the loop is lost as well.
TEST(GoodputEttr, TheLoopAroundAStepIsItsCostACheckpointsStallIsNot) {
  std::vector<StepTime> run;
  std::int64_t t = 0;
  for (std::int64_t s = 1; s <= 300; ++s) {
    t += (s > 1 ? 4 : 0) + ((s - 1) % 10 == 0 && s > 1 ? 30 : 0) + 100;
    run.push_back({s, t, 100, 1, 4});
  }
  const auto by_interval = own_step_times(run, 50, StepCost::kInterval, 10);
  EXPECT_DOUBLE_EQ(by_interval.at(150), 104);
  EXPECT_DOUBLE_EQ(by_interval.at(11), 104);  // the line after a checkpoint counts at the usual cost
  const RunGoodput g = run_goodput(run, by_interval);
  EXPECT_DOUBLE_EQ(g.wall_ms, 300 * 100 + 299 * 4 + 29 * 30);
  EXPECT_DOUBLE_EQ(g.productive_ms, 300 * 104);
  EXPECT_NEAR(g.ettr, 300.0 * 104 / (300 * 100 + 299 * 4 + 29 * 30), 1e-12);

  // Without checkpoint_every, a stall counts as part of the steps' cost (it is under 3x them).
  const auto with_stalls = own_step_times(run, 50, StepCost::kInterval, 0);
  EXPECT_GT(with_stalls.at(150), 106);

  const RunGoodput timer = run_goodput(run, own_step_times(run, 50, StepCost::kTimer, 10));
  EXPECT_DOUBLE_EQ(timer.productive_ms, 300 * 100);
  EXPECT_LT(timer.ettr, g.ettr - 0.035);
}

}  // namespace
}  // namespace hdp::bench
