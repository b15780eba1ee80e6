// File: elastic/goodput.h
//
// The job's goodput: its effective training time ratio (ETTR) and what it is made of, kept as
// fields of the `state` hash (elastic/job_state.h) by rank 0 with each step report, and read back
// by rank 0 of every later generation (which continues the totals: across resizes, recoveries and
// a whole-job restart, since the state outlives every worker), by `hdp status` and the dashboard.
//
// Definitions (docs/redis-schema.md, docs/observability.md):
//   - wall time: from the start of the job's first step (`started_at_ms`, the wall clock of rank 0
//     then) to now; for a job completed, stopped or failed, to its last state write
//     (`updated_at_ms`); less the time the job stood stopped (`idle_ms`): from an `hdp stop` (the
//     state's last write while stopped) to the agent start that resumed it (resumed_idle_ms(),
//     written by clear_stopped_outcome in elastic/job_state.h). A stop is the user's choice, not
//     lost time; a job whose workers all died and came back (a crash, a preempted allocation)
//     counts that time as lost.
//   - productive time (`productive_ms`): the sum of rank 0's step times (`step_ms`) of the steps
//     kept, each step number counted once: the first time rank 0 reports it.
//   - steps computed twice (`recomputed_steps`, their time `recomputed_ms`): a step reported at a
//     number not above the furthest reported (`furthest_step`), after a rollback to a checkpoint or
//     in memory. Its first run stays counted as productive (as the stand-in for the run kept); the
//     redo's time is lost.
//   - lost time: wall time - productive time: every wait, recovery, restart, redone step, and
//     whatever rank 0 did outside its steps (evaluation, checkpoint hand-off).
//   - ETTR: productive time / wall time, in (0, 1]; `ettr` in the state is as of rank 0's last
//     report; goodput_figures() gives the live figure (it falls while nothing trains).
// A job that reported steps before these fields existed starts its accounting at its next report.
//
// GoodputAccount is rank 0's arithmetic: no store, no clock (every call takes the time), so that
// it is tested alone. Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "elastic/transaction.h"

namespace hdp::elastic {

// The state's goodput fields (job_state.h lists them among its validated fields).
namespace goodput {
inline constexpr const char* kStartedAtMs = "started_at_ms";        // integer, wall clock ms
inline constexpr const char* kFurthestStep = "furthest_step";       // integer
inline constexpr const char* kRecomputedSteps = "recomputed_steps"; // integer
inline constexpr const char* kProductiveMs = "productive_ms";       // number
inline constexpr const char* kRecomputedMs = "recomputed_ms";       // number
inline constexpr const char* kEttr = "ettr";                        // number in (0, 1]
inline constexpr const char* kIdleMs = "idle_ms";                   // integer: stood stopped, ms
}  // namespace goodput

using StateFields = std::map<std::string, std::string>;

struct GoodputTotals {
  std::int64_t started_at_ms = -1;  // -1: no step accounted yet
  std::int64_t furthest_step = -1;  // -1: none reported
  std::int64_t recomputed_steps = 0;
  double productive_ms = 0;
  double recomputed_ms = 0;
  std::int64_t idle_ms = 0;  // stood stopped: not wall time
};

// The totals a state hash holds (its fields validated: job_state.h); none accounted when it has
// no `started_at_ms`, with `furthest_step` then from `step` (the last step reported).
GoodputTotals read_goodput_totals(const StateFields& state);

// The state's `idle_ms` once the job that `state` shows stopped is resumed at `now_ms`: what it held
// plus the time since the stop's last write (never negative); nullopt when the state is not a
// stopped job's (no `status` "stopped" or no `updated_at_ms`), which adds nothing.
std::optional<std::int64_t> resumed_idle_ms(const StateFields& state, std::int64_t now_ms);

// productive / wall, clamped to (0, 1] (a wall shorter than the productive time: the clocks of two
// rank-0 hosts differ); 1 when no time has passed.
double ettr_of(double productive_ms, double wall_ms);

class GoodputAccount {
 public:
  // Continues the totals of `state` (rank 0, before its first report of a generation), unless
  // this account's own are newer: it reported last (the same start, nothing further in the state),
  // and its reports that a new generation's fence refused are in its totals, not in the state.
  void seed(const StateFields& state);
  // Step `step` took `step_ms` and ended at `now_ms` (wall clock): a new step adds to the
  // productive time, one already reported to the steps computed twice. Returns whether it was
  // computed twice.
  bool step(std::int64_t step, double step_ms, std::int64_t now_ms);
  // The fields a step report writes (empty before the first step).
  Fields fields(std::int64_t now_ms) const;
  double ettr(std::int64_t now_ms) const;
  const GoodputTotals& totals() const { return totals_; }

 private:
  GoodputTotals totals_;
};

// What `hdp status` and the dashboard show, at `now_ms`.
struct GoodputFigures {
  double ettr = 1;
  double wall_ms = 0, productive_ms = 0, lost_ms = 0, recomputed_ms = 0;
  std::int64_t recomputed_steps = 0;
};
// nullopt: no step accounted yet.
std::optional<GoodputFigures> goodput_figures(const StateFields& state, std::int64_t now_ms);
// "ETTR 0.97 (productive 1 h 02 min of 1 h 04 min; 3 steps computed twice)".
std::string goodput_text(const GoodputFigures& figures);
// "1 h 02 min", "3 min 05 s", "12.3 s".
std::string duration_text(double ms);

// One recovery: a `recovered` event (trainer/step_reporter.h): from the interruption to the first
// step after it. `kind`: how the state came back (the event's `source`: memory, checkpoint, seed,
// init_from), or the `source` of the `continue`/`restore` event of its generation for an event
// without one, else "unknown".
struct RecoveryRecord {
  std::string kind;
  double seconds = 0;
  std::int64_t lost_steps = 0, step = 0, generation = 0, time_ms = 0;
};
// The last `count` recoveries among `events` (oldest first, as JobSnapshot keeps them), oldest
// first. Fields that are not numbers read as 0.
std::vector<RecoveryRecord> recent_recoveries(const std::vector<StreamEntry>& events, std::size_t count);

}  // namespace hdp::elastic
