#include "bench/goodput_schedule.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <random>
#include <stdexcept>
#include <utility>

#include "common/median.h"

namespace hdp::bench {

namespace {

constexpr std::array<std::pair<FaultKind, const char*>, 6> kNames = {{
    {FaultKind::kNodeKill, "node_kill"},
    {FaultKind::kWorkerKill, "worker_kill"},
    {FaultKind::kNodeStop, "node_stop"},
    {FaultKind::kRedisStall, "redis_stall"},
    {FaultKind::kDrain, "drain"},
    {FaultKind::kSpareJoin, "spare_join"},
}};

}  // namespace

const char* kind_name(FaultKind kind) {
  for (const auto& [k, name] : kNames) {
    if (k == kind) return name;
  }
  return "unknown";
}

std::optional<FaultKind> kind_from_name(const std::string& name) {
  for (const auto& [k, n] : kNames) {
    if (name == n) return k;
  }
  return std::nullopt;
}

std::vector<FaultKind> all_kinds() {
  std::vector<FaultKind> kinds;
  for (const auto& [k, name] : kNames) kinds.push_back(k);
  return kinds;
}

std::vector<Fault> make_schedule(const ScheduleOptions& o) {
  if (!(o.mtbf_s > 0)) throw std::invalid_argument("the MTBF must be above 0 s");
  if (o.kinds.empty()) throw std::invalid_argument("no fault kinds to draw from");
  if (o.min_stop_s > o.max_stop_s) throw std::invalid_argument("the shortest stall is longer than the longest");
  std::mt19937_64 rng(o.seed);
  std::exponential_distribution<double> gap(1.0 / o.mtbf_s);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::uniform_real_distribution<double> stop(o.min_stop_s, o.max_stop_s);
  std::vector<Fault> faults;
  int spares = 0;
  for (double t = gap(rng); t < o.horizon_s; t += gap(rng)) {
    std::vector<FaultKind> kinds = o.kinds;
    if (spares >= o.max_spares) std::erase(kinds, FaultKind::kSpareJoin);
    if (kinds.empty()) break;  // only spare joins were asked for, and they are all used
    Fault f;
    f.at_s = t;
    f.kind = kinds[std::uniform_int_distribution<std::size_t>(0, kinds.size() - 1)(rng)];
    f.pick = unit(rng);
    if (f.kind == FaultKind::kNodeStop || f.kind == FaultKind::kRedisStall) f.duration_s = stop(rng);
    spares += f.kind == FaultKind::kSpareJoin;
    faults.push_back(f);
  }
  return faults;
}

std::vector<Fault> only_kinds(const std::vector<Fault>& schedule, const std::vector<FaultKind>& kinds) {
  std::vector<Fault> out;
  for (const Fault& f : schedule) {
    if (std::find(kinds.begin(), kinds.end(), f.kind) != kinds.end()) out.push_back(f);
  }
  return out;
}

int pick_index(double pick, int n) {
  return std::clamp(static_cast<int>(std::floor(pick * n)), 0, n - 1);
}

RunGoodput run_goodput(const std::vector<StepTime>& run, const std::map<std::int64_t, double>& fault_free_ms) {
  if (run.empty()) throw std::invalid_argument("the run has no step lines");
  if (fault_free_ms.empty()) throw std::invalid_argument("the fault-free run has no step lines");
  std::vector<double> times;
  for (const auto& [step, ms] : fault_free_ms) times.push_back(ms);
  const double typical = median(times);
  RunGoodput g;
  double start = run.front().time_ms - run.front().step_ms, end = run.front().time_ms;
  std::int64_t furthest = 0;
  for (const StepTime& s : run) {
    g.recomputed_steps += s.step <= furthest;
    furthest = std::max(furthest, s.step);
    start = std::min(start, s.time_ms - s.step_ms);
    end = std::max<double>(end, s.time_ms);
  }
  g.lines = static_cast<std::int64_t>(run.size());
  g.last_step = run.back().step;
  for (std::int64_t step = 1; step <= g.last_step; ++step) {
    const auto it = fault_free_ms.find(step);
    g.productive_ms += it == fault_free_ms.end() ? typical : it->second;
  }
  g.wall_ms = end - start;
  g.ettr = g.wall_ms > 0 ? g.productive_ms / g.wall_ms : 0;
  return g;
}

std::map<std::int64_t, double> own_step_times(const std::vector<StepTime>& run, int window, StepCost cost,
                                              int checkpoint_every) {
  std::map<std::int64_t, double> out;
  if (run.empty()) return out;
  const auto n = static_cast<std::ptrdiff_t>(run.size());
  // Each line's cost, and whether it may inform an estimate: not while it settles after a break,
  // nor (by interval) right after a checkpoint step.
  std::vector<double> costs(run.size());
  std::vector<bool> usable(run.size(), false);
  int since_break = kSettlingLines;
  for (std::ptrdiff_t i = 0; i < n; ++i) {
    const StepTime& line = run[i];
    bool breaks = i == 0;
    if (!breaks) {
      const StepTime& before = run[i - 1];
      breaks = line.generation != before.generation || line.world != before.world || line.step != before.step + 1 ||
               static_cast<double>(line.time_ms) - line.step_ms - static_cast<double>(before.time_ms) > kBreakGapMs;
    }
    since_break = breaks ? 0 : since_break + 1;
    usable[i] = since_break >= kSettlingLines;  // i >= 1 then: the line before it is its step's previous
    costs[i] = line.step_ms;
    if (cost == StepCost::kInterval && usable[i]) {
      costs[i] = static_cast<double>(line.time_ms - run[i - 1].time_ms);
      usable[i] = checkpoint_every <= 0 || run[i - 1].step % checkpoint_every != 0;
    }
  }
  std::vector<double> all;
  for (std::ptrdiff_t i = 0; i < n; ++i) {
    if (usable[i]) all.push_back(costs[i]);
  }
  const double whole_run = all.empty() ? median(costs) : median(all);
  for (std::ptrdiff_t i = 0; i < n; ++i) {
    std::vector<double> near;
    for (std::ptrdiff_t j = std::max<std::ptrdiff_t>(0, i - window); j <= std::min(n - 1, i + window); ++j) {
      if (usable[j]) near.push_back(costs[j]);
    }
    double estimate = whole_run;
    if (!near.empty()) {
      const double limit = kOutlierFactor * median(near);
      double sum = 0;
      int count = 0;
      for (double ms : near) {
        if (ms > limit) continue;
        sum += ms;
        ++count;
      }
      estimate = sum / count;  // count >= 1: the median itself is within the limit
    }
    out[run[i].step] = estimate;
  }
  return out;
}

}  // namespace hdp::bench
