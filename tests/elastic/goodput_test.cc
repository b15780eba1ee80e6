// elastic/goodput.h: rank 0's goodput arithmetic (steps kept, a rollback that redoes steps, a
// recovery's wait, a whole-job restart that continues the totals from the state), the live figures
// readers compute from the state, their text, and the recoveries read from the events.
#include "elastic/goodput.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "common/error.h"
#include "elastic/job_keys.h"
#include "elastic/job_state.h"
#include "elastic/memory_store.h"

namespace hdp::elastic {
namespace {

constexpr std::int64_t kT0 = 1'700'000'000'000;  // wall clock of the first step's start, ms

StateFields as_state(const Fields& fields, std::int64_t step) {
  StateFields state(fields.begin(), fields.end());
  state["step"] = std::to_string(step);
  state["status"] = "running";
  return state;
}

// Steps first..last of `ms` each, back to back from `start`; returns when the last ended.
std::int64_t run_steps(GoodputAccount& account, std::int64_t first, std::int64_t last, std::int64_t start, double ms) {
  std::int64_t now = start;
  for (std::int64_t s = first; s <= last; ++s) {
    now += static_cast<std::int64_t>(ms);
    EXPECT_FALSE(account.step(s, ms, now)) << "step " << s << " counted as computed twice";
  }
  return now;
}

TEST(Goodput, StepsBackToBackAreAllProductive) {
  GoodputAccount account;
  EXPECT_TRUE(account.fields(kT0).empty()) << "nothing to write before the first step";
  const std::int64_t end = run_steps(account, 1, 10, kT0, 100);
  EXPECT_EQ(account.totals().started_at_ms, kT0);  // the first step's start: its end less its time
  EXPECT_DOUBLE_EQ(account.totals().productive_ms, 1000);
  EXPECT_EQ(account.totals().furthest_step, 10);
  EXPECT_DOUBLE_EQ(account.ettr(end), 1.0);
  const StateFields fields = as_state(account.fields(end), 10);
  EXPECT_EQ(fields.at("started_at_ms"), std::to_string(kT0));
  EXPECT_EQ(fields.at("productive_ms"), "1000.0");
  EXPECT_EQ(fields.at("furthest_step"), "10");
  EXPECT_EQ(fields.at("recomputed_steps"), "0");
  EXPECT_EQ(fields.at("ettr"), "1.0000");
  // Every field is one the state's validation accepts.
  for (const auto& [name, value] : fields) EXPECT_NO_THROW(validate_state_field(name, value)) << name;
}

TEST(Goodput, ARecoverysWaitIsLostTime) {
  GoodputAccount account;
  std::int64_t now = run_steps(account, 1, 10, kT0, 100);  // 1 s of steps
  now += 4000;                                              // a peer lost: 4 s until training resumes
  now = run_steps(account, 11, 20, now, 100);               // 1 s more
  EXPECT_DOUBLE_EQ(account.totals().productive_ms, 2000);
  EXPECT_NEAR(account.ettr(now), 2000.0 / 6000.0, 1e-12);
  const auto figures = goodput_figures(as_state(account.fields(now), 20), now);
  ASSERT_TRUE(figures);
  EXPECT_DOUBLE_EQ(figures->wall_ms, 6000);
  EXPECT_DOUBLE_EQ(figures->lost_ms, 4000);
  EXPECT_NEAR(figures->ettr, 1.0 / 3.0, 1e-4);  // written with 4 decimals, recomputed exactly here
  // Live: while nothing trains, the figure falls.
  const auto later = goodput_figures(as_state(account.fields(now), 20), now + 4000);
  EXPECT_NEAR(later->ettr, 0.2, 1e-12);
  EXPECT_DOUBLE_EQ(later->lost_ms, 8000);
}

TEST(Goodput, ARollbackRedoingKStepsCountsThemTwiceAndTheirTimeLost) {
  GoodputAccount account;
  std::int64_t now = run_steps(account, 1, 20, kT0, 100);  // 2 s
  now += 1000;                                              // the restore from step 17's checkpoint
  for (std::int64_t s = 18; s <= 20; ++s) {                 // k = 3 steps redone
    now += 100;
    EXPECT_TRUE(account.step(s, 100, now)) << s;
  }
  now = run_steps(account, 21, 30, now, 100);
  EXPECT_EQ(account.totals().recomputed_steps, 3);
  EXPECT_DOUBLE_EQ(account.totals().recomputed_ms, 300);
  EXPECT_DOUBLE_EQ(account.totals().productive_ms, 3000);  // steps 1..30, once each
  EXPECT_EQ(account.totals().furthest_step, 30);
  const auto figures = goodput_figures(as_state(account.fields(now), 30), now);
  EXPECT_DOUBLE_EQ(figures->wall_ms, 4300);
  EXPECT_DOUBLE_EQ(figures->lost_ms, 1300);  // the restore and the redone steps
  EXPECT_EQ(figures->recomputed_steps, 3);
  EXPECT_DOUBLE_EQ(figures->recomputed_ms, 300);
}

TEST(Goodput, AWholeJobRestartContinuesTheTotalsOfTheState) {
  GoodputAccount first;
  std::int64_t now = run_steps(first, 1, 10, kT0, 100);
  first.step(9, 100, now += 100);  // one step redone before the job went down
  const StateFields state = as_state(first.fields(now), 9);  // the state says step 9 last: furthest is kept
  // Every worker gone; 60 s later a new rank 0 restores step 8's checkpoint and redoes 9 and 10.
  GoodputAccount second;
  second.seed(state);
  EXPECT_EQ(second.totals().started_at_ms, kT0);
  EXPECT_EQ(second.totals().furthest_step, 10);
  EXPECT_EQ(second.totals().recomputed_steps, 1);
  now += 60'000;
  EXPECT_TRUE(second.step(9, 100, now += 100));
  EXPECT_TRUE(second.step(10, 100, now += 100));
  EXPECT_FALSE(second.step(11, 100, now += 100));
  EXPECT_EQ(second.totals().recomputed_steps, 3);
  EXPECT_DOUBLE_EQ(second.totals().productive_ms, 1100);
  EXPECT_NEAR(second.ettr(now), 1100.0 / static_cast<double>(now - kT0), 1e-12);
  EXPECT_EQ(now - kT0, 1000 + 100 + 60'000 + 300);
}

TEST(Goodput, ARank0ThatReportedLastKeepsItsOwnTotalsAndAnotherTakesTheStates) {
  GoodputAccount account;
  std::int64_t now = run_steps(account, 1, 10, kT0, 100);
  const StateFields written = as_state(account.fields(now), 10);
  now = run_steps(account, 11, 12, now, 100);  // reports the new generation's fence refused
  account.seed(written);                       // the same process, rank 0 of the next generation
  EXPECT_EQ(account.totals().furthest_step, 12);
  EXPECT_DOUBLE_EQ(account.totals().productive_ms, 1200);
  // Another rank 0 reported further in between: its totals are the job's.
  GoodputAccount other;
  run_steps(other, 1, 20, kT0, 100);
  account.seed(as_state(other.fields(kT0 + 2000), 20));
  EXPECT_EQ(account.totals().furthest_step, 20);
  EXPECT_DOUBLE_EQ(account.totals().productive_ms, 2000);
}

TEST(Goodput, AStateWrittenBeforeTheFieldsExistedStartsAtTheNextReport) {
  GoodputAccount account;
  account.seed({{"step", "40"}, {"status", "running"}});
  EXPECT_EQ(account.totals().started_at_ms, -1);
  EXPECT_EQ(account.totals().furthest_step, 40);
  EXPECT_FALSE(goodput_figures({{"step", "40"}}, kT0));
  EXPECT_TRUE(account.step(40, 250, kT0 + 250));  // the step reported last, redone
  EXPECT_EQ(account.totals().started_at_ms, kT0);
  EXPECT_FALSE(account.step(41, 250, kT0 + 500));
  EXPECT_DOUBLE_EQ(account.ettr(kT0 + 500), 0.5);
}

TEST(Goodput, AnEndedJobsWallTimeEndsAtItsLastWrite) {
  GoodputAccount account;
  const std::int64_t end = run_steps(account, 1, 10, kT0, 100);
  StateFields state = as_state(account.fields(end), 10);
  state["status"] = "completed";
  state["updated_at_ms"] = std::to_string(end + 1000);
  const auto figures = goodput_figures(state, end + 3'600'000);
  EXPECT_DOUBLE_EQ(figures->wall_ms, 2000);
  EXPECT_DOUBLE_EQ(figures->ettr, 0.5);
}

TEST(Goodput, ClocksOfTwoHostsThatDisagreeNeverGiveMoreThanOne) {
  EXPECT_DOUBLE_EQ(ettr_of(1000, 900), 1.0);
  EXPECT_DOUBLE_EQ(ettr_of(0, 0), 1.0);
  EXPECT_GT(ettr_of(0, 1000), 0.0);
  GoodputAccount account;
  account.seed({{"started_at_ms", std::to_string(kT0)}, {"productive_ms", "5000.0"}, {"step", "50"}});
  account.step(51, 100, kT0 + 3000);  // this host's clock is behind the first rank 0's
  EXPECT_DOUBLE_EQ(account.ettr(kT0 + 3000), 1.0);
  const auto figures = goodput_figures(as_state(account.fields(kT0 + 3000), 51), kT0 + 3000);
  EXPECT_DOUBLE_EQ(figures->ettr, 1.0);
  EXPECT_DOUBLE_EQ(figures->lost_ms, 0.0);
}

TEST(Goodput, TheTextSaysTheRatioTheTimesAndTheStepsComputedTwice) {
  GoodputFigures f;
  f.productive_ms = 62 * 60'000;
  f.wall_ms = 64 * 60'000;
  f.ettr = ettr_of(f.productive_ms, f.wall_ms);
  f.recomputed_steps = 3;
  EXPECT_EQ(goodput_text(f), "ETTR 0.97 (productive 1 h 02 min of 1 h 04 min; 3 steps computed twice)");
  EXPECT_EQ(duration_text(12'345), "12.3 s");
  EXPECT_EQ(duration_text(185'000), "3 min 05 s");
  f.recomputed_steps = 1;
  EXPECT_NE(goodput_text(f).find("1 step computed twice"), std::string::npos);
}

// A stop is the user's choice: the time between `hdp stop` and the agents' start that resumed the job
// is not wall time (resumed_idle_ms, written by clear_stopped_outcome below); a start-up after it is.
TEST(Goodput, ATimeStoodStoppedIsNotWallTime) {
  GoodputAccount first;
  const std::int64_t end = run_steps(first, 1, 10, kT0, 100);
  StateFields stopped = as_state(first.fields(end), 10);
  stopped["status"] = "stopped";
  stopped["updated_at_ms"] = std::to_string(end);
  // Stopped, then resumed an hour later; the stopped job's own figures end at its stop.
  EXPECT_DOUBLE_EQ(goodput_figures(stopped, end + 3'600'000)->ettr, 1.0);
  const std::int64_t resumed = end + 3'600'000;
  ASSERT_EQ(resumed_idle_ms(stopped, resumed), std::optional<std::int64_t>(3'600'000));
  StateFields running = stopped;
  running["status"] = "running";
  running[goodput::kIdleMs] = std::to_string(*resumed_idle_ms(stopped, resumed));
  EXPECT_EQ(resumed_idle_ms(running, resumed), std::nullopt) << "only a stopped job's state adds idle time";
  GoodputAccount second;
  second.seed(running);
  EXPECT_EQ(second.totals().idle_ms, 3'600'000);
  const std::int64_t now = run_steps(second, 11, 20, resumed + 500, 100);  // a 0.5 s start-up: lost
  EXPECT_NEAR(second.ettr(now), 2000.0 / 2500.0, 1e-12);
  const auto figures = goodput_figures(as_state(second.fields(now), 20), now);
  ASSERT_TRUE(figures);
  EXPECT_DOUBLE_EQ(figures->wall_ms, 2500);
  EXPECT_DOUBLE_EQ(figures->lost_ms, 500);
  // A second stop adds to the first.
  StateFields again = as_state(second.fields(now), 20);
  again["status"] = "stopped";
  again["updated_at_ms"] = std::to_string(now);
  EXPECT_EQ(resumed_idle_ms(again, now + 1000), std::optional<std::int64_t>(3'601'000));
  // A clock that went back never makes it negative.
  EXPECT_EQ(resumed_idle_ms(again, now - 5000), std::optional<std::int64_t>(3'600'000));
}

// The agent's resume (clear_stopped_outcome) records the stopped time with the outcome's erasure, on
// a real Store's semantics (MemoryStore); a job that was not stopped is left alone.
TEST(Goodput, ResumingAStoppedJobRecordsTheTimeItStoodStopped) {
  MemoryStore store;
  const std::int64_t stopped_at = now_ms() - 5000;
  Transaction setup;
  setup.add(Write::set(keys::kOutcome, "stopped"))
      .add(Write::hash_set(keys::kState, {{"status", "stopped"},
                                          {"updated_at_ms", std::to_string(stopped_at)},
                                          {goodput::kIdleMs, "1000"}}));
  ASSERT_TRUE(store.commit(setup).applied);
  EXPECT_TRUE(clear_stopped_outcome(store));
  EXPECT_EQ(store.get(keys::kOutcome), std::nullopt);
  const std::int64_t idle = std::stoll(store.hash_get_all(keys::kState).at(goodput::kIdleMs));
  EXPECT_GE(idle, 6000);
  EXPECT_LE(idle, 6000 + 5000) << "the test's own run time, with a margin for a loaded machine";
  // Not stopped (running, or completed): nothing erased, nothing added.
  EXPECT_FALSE(clear_stopped_outcome(store));
  Transaction completed;
  completed.add(Write::set(keys::kOutcome, "completed"));
  ASSERT_TRUE(store.commit(completed).applied);
  EXPECT_FALSE(clear_stopped_outcome(store));
  EXPECT_EQ(store.get(keys::kOutcome), std::optional<std::string>("completed"));
  EXPECT_EQ(store.hash_get_all(keys::kState).at(goodput::kIdleMs), std::to_string(idle));
}

TEST(Goodput, TheStatesValidationKnowsTheFields) {
  EXPECT_NO_THROW(validate_state_field("productive_ms", "1234.5"));
  EXPECT_THROW(validate_state_field("ettr", "nan"), InvalidArgument);
  EXPECT_THROW(validate_state_field("started_at_ms", "-3"), InvalidArgument);
  EXPECT_THROW(validate_state_field("recomputed_steps", "two"), InvalidArgument);
}

StreamEntry event(std::string id, Fields fields) { return {std::move(id), std::move(fields)}; }

TEST(Goodput, RecoveriesComeFromTheRecoveredEventsWithTheirKind) {
  const std::vector<StreamEntry> events = {
      event("1-0", {{"type", "restore"}, {"source", "seed"}, {"generation", "1"}, {"step", "0"}}),
      event("2-0", {{"type", "continue"}, {"source", "memory"}, {"generation", "2"}, {"seconds", "0.100"}}),
      // An event of a worker that wrote no `source`: the kind of its generation's start.
      event("3-0", {{"type", "recovered"}, {"generation", "2"}, {"seconds", "2.500"}, {"lost_steps", "0"},
                    {"step", "31"}, {"time_ms", "3000"}}),
      event("4-0", {{"type", "recovered"}, {"source", "checkpoint"}, {"generation", "3"}, {"seconds", "7.250"},
                    {"lost_steps", "4"}, {"step", "41"}}),
      event("5-0", {{"type", "recovered"}, {"generation", "9"}, {"seconds", "x"}}),
  };
  auto all = recent_recoveries(events, 10);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].kind, "memory");
  EXPECT_DOUBLE_EQ(all[0].seconds, 2.5);
  EXPECT_EQ(all[0].step, 31);
  EXPECT_EQ(all[0].time_ms, 3000);
  EXPECT_EQ(all[1].kind, "checkpoint");
  EXPECT_EQ(all[1].lost_steps, 4);
  EXPECT_EQ(all[2].kind, "unknown");
  EXPECT_DOUBLE_EQ(all[2].seconds, 0);
  auto last = recent_recoveries(events, 1);
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0].generation, 9);
}

}  // namespace
}  // namespace hdp::elastic
