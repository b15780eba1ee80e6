// File: bench/goodput_schedule.h
//
// bench_goodput's pieces that are tested alone (tests/bench/goodput_schedule_test.cc):
//   - the failure schedule: faults at exponential inter-arrival times of mean `mtbf_s` (a Poisson
//     process, as failures of independent machines are), each of a kind drawn uniformly from the
//     kinds asked for, from one seed, so that two runs (and hdp and torchrun in one run) meet the
//     same faults at the same times. A fault names no node: it carries a uniform `pick` in [0, 1)
//     that the bench maps onto the nodes eligible when the fault comes (node = floor(pick * n)).
//     A hot spare joins at most `max_spares` times (the later draws of that kind are drawn again),
//     so that the fleet stays bounded.
//   - the goodput of a run from its per-step lines: ETTR = the sum of the fault-free step time of
//     the steps kept (1..the last step) / the wall time (from the start of the first step to the
//     end of the last), and the steps computed twice (a line for a step not above the furthest
//     step before it). The fault-free step time is another run's (run_goodput), or the mean of the
//     run's own undisturbed steps nearby (own_step_times).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace hdp::bench {

enum class FaultKind {
  kNodeKill,    // SIGKILL of a node's agent and workers; the node starts again `return_s` later
  kWorkerKill,  // SIGKILL of one worker; its agent restarts it
  kNodeStop,    // SIGSTOP of a node's agent and workers for `duration_s`, then SIGCONT
  kRedisStall,  // the store answers nothing for `duration_s`
  kDrain,       // `hdp drain` of a node; its agent starts again `return_s` after it exits
  kSpareJoin,   // one more node starts (a hot spare: standing by while the job is at its maximum)
};

const char* kind_name(FaultKind kind);
std::optional<FaultKind> kind_from_name(const std::string& name);
std::vector<FaultKind> all_kinds();

struct Fault {
  double at_s = 0;       // from the start of training
  FaultKind kind = FaultKind::kNodeKill;
  double pick = 0;       // [0, 1): which of the eligible nodes
  double duration_s = 0; // kNodeStop, kRedisStall: how long; else 0
};

struct ScheduleOptions {
  double mtbf_s = 30;
  double horizon_s = 600;  // no fault at or after this time
  std::uint64_t seed = 1;
  std::vector<FaultKind> kinds = all_kinds();
  int max_spares = 1;
  double min_stop_s = 1, max_stop_s = 8;  // uniform: a stall shorter and longer than a lease
};

// Throws std::invalid_argument on mtbf_s <= 0, no kinds, or min_stop_s > max_stop_s.
std::vector<Fault> make_schedule(const ScheduleOptions& options);

// The faults of `kinds` only, at their times (torchrun gets the node kills of the same schedule).
std::vector<Fault> only_kinds(const std::vector<Fault>& schedule, const std::vector<FaultKind>& kinds);

// floor(pick * n), within [0, n); n > 0.
int pick_index(double pick, int n);

// One executed step of a run, as its per-step line says (bench/trainer_job.h's Line has more).
struct StepTime {
  std::int64_t step = 0;
  std::int64_t time_ms = 0;  // wall clock when it completed
  double step_ms = 0;
  std::int64_t generation = 0;  // hdp's membership generation; 0 when the line has none
  int world = 0;                // the world size it ran on; 0 when unknown
};

struct RunGoodput {
  std::int64_t last_step = 0;
  std::int64_t lines = 0;
  std::int64_t recomputed_steps = 0;
  double wall_ms = 0;
  double productive_ms = 0;  // sum of the fault-free step times of steps 1..last_step
  double ettr = 0;
};

// `fault_free_ms`: the fault-free time of each step; a step it lacks counts at the median of its
// times. Throws std::invalid_argument when `run` or `fault_free_ms` is empty.
RunGoodput run_goodput(const std::vector<StepTime>& run, const std::map<std::int64_t, double>& fault_free_ms);

// What a line costs, as own_step_times() reads it:
//  - kInterval: the time from the previous line's end to its own (the line's step and the loop
//    around it: hdp's step boundary, where the ranks agree whether the next step runs, and the
//    report). What one more step adds to a run without faults, and so the fault-free step time.
//  - kTimer: the step's own timer (step_ms), which leaves out the loop around the step. With
//    four processes on two cores, how much of a step's wall time falls outside rank 0's timer
//    depends on when the scheduler runs rank 0 after the boundary (measured: the boundary's
//    exchange took 0.4-1.8 ms, or 3.5-10.5 ms while the other ranks already computed), so this cost
//    counts that split as lost. Reported beside the other for comparison with earlier figures.
enum class StepCost { kInterval, kTimer };

// The fault-free time of each step as the run itself shows it, for a machine whose load drifts
// between runs: for each line, the mean cost (`cost`) of the undisturbed lines at most `window`
// before or after it; a step computed twice gets its last line's. Undisturbed: not one of the first
// kSettlingLines lines after a break (the first line, a new generation or world size, a step that
// is not the one after the previous line's, or a start more than kBreakGapMs after the previous
// line's end: a restart that resumed at the next step), not the line after a checkpoint step
// (step % checkpoint_every == 0; 0: none) when the cost is the interval, which holds the
// checkpoint's stall, and not above kOutlierFactor times the median of those in the window (a step
// that held a fault: a stall, a stop shorter than a lease). Those lines are what a fault (or a
// checkpoint) costs beyond its gap, so they are left out of the estimate but still get it as their
// own fault-free time. The mean, not the median: a step's expected cost is its mean, and step
// times are skewed to the right (two cores shared by four processes); a median would count that
// skew as lost time even in a run without faults. A window without an undisturbed line takes the
// median of the whole run's costs. Empty for an empty run.
inline constexpr int kSettlingLines = 2;
inline constexpr double kBreakGapMs = 1000;
inline constexpr double kOutlierFactor = 3;
std::map<std::int64_t, double> own_step_times(const std::vector<StepTime>& run, int window,
                                              StepCost cost = StepCost::kInterval, int checkpoint_every = 0);

}  // namespace hdp::bench
