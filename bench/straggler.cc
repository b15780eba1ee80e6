// bench_straggler: what a slow rank costs the trainer, with and without speed-aware planning. One
// agent with 4 `hdp train` workers (a private redis-server, real processes, evictions off), the
// same job run five times in one run:
//   baseline       no straggler;
//   aware, blind   worker 3 slowed to half speed from step 10 by the trainer's slow: fault (it
//                  sleeps as long as it computed after each micro-batch), planned with the
//                  measured speeds (aware) or with equal speeds (blind, --no-speed-aware);
//   real aware, real blind
//                  worker 3 limited from step 10 by a CPU cgroup quota (the throttle: fault, a
//                  real slowdown: the kernel's scheduler, not a sleep) to half the CPU a worker
//                  has (--throttle-cpus; default: the machine's cores / 4 / 2), where this
//                  process may create CPU cgroups; "unavailable" otherwise.
// Each run's throughput is the tokens of steps --from..--steps over the wall time they took (from
// the completion of step from-1 to that of the last, rank 0's metrics file); the loss is
// 1 - run / baseline. "Rebalanced" is the first step from 10 on whose plan gives worker 3 a speed
// below 0.8 of the median of the others: how many steps after the slowdown it came, and the time
// from the slowdown's start (step 9 completed) to that step's start.
//
// Usage: bench_straggler [--json] [--steps 40] [--from 13] [--model tiny] [--context 1024]
//                        [--batch-tokens 16384] [--data synthetic:github] [--throttle-cpus X]
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "bench/trainer_job.h"
#include "common/median.h"
#include "trainer/cpu_throttle.h"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr int kWorkers = 4;
constexpr int kSlowRank = 3;
constexpr int kSlowFrom = 10;

struct Settings {
  std::string model = "tiny";
  std::int64_t context = 1024;
  std::int64_t batch_tokens = 16384;
  int steps = 40;
  int from = 13;
  std::string data = "synthetic:github";
  double throttle_cpus = 0;
};

struct Run {
  std::string name;
  double tokens_per_s = 0;
  std::optional<int> rebalanced_after_steps;  // steps from the slowdown to the first rebalanced step
  std::optional<double> rebalanced_after_s;
  double slow_speed = 0;  // worker 3's measured relative speed at the last step
  bool ok = false;
};

Run run(const Settings& s, const std::string& hdp, const std::string& name, std::vector<std::string> extra) {
  Run r{.name = name};
  std::vector<std::string> train = {"--model", s.model, "--steps", std::to_string(s.steps), "--context",
                                    std::to_string(s.context), "--capacity", std::to_string(s.context),
                                    "--batch-tokens", std::to_string(s.batch_tokens), "--data", s.data,
                                    "--checkpoint-every", "1000000", "--threads", "1", "--log-every", "1000000",
                                    "--no-evict-stragglers"};
  train.insert(train.end(), extra.begin(), extra.end());
  hdp::bench::Job job(hdp, 2000ms, "straggler-" + name, train);
  job.start_agent("a", kWorkers, "1:1");
  if (!job.wait([&](const auto& lines) { return !lines.empty() && lines.back().step >= s.steps; }, 900s)) {
    std::cerr << "bench_straggler: the " << name << " run did not finish\n";
    return r;
  }
  const auto lines = hdp::bench::read_lines(job.metrics());
  auto at = [&](std::int64_t step) -> const hdp::bench::Line* {
    for (const auto& l : lines) {
      if (l.step == step) return &l;
    }
    return nullptr;
  };
  const auto* before = at(s.from - 1);
  const auto* last = at(s.steps);
  if (!before || !last || last->time_ms <= before->time_ms) return r;
  r.tokens_per_s = static_cast<double>(s.batch_tokens) * (s.steps - s.from + 1) /
                   ((last->time_ms - before->time_ms) / 1000.0);
  if (!last->speeds.empty()) r.slow_speed = last->speeds[kSlowRank];
  const auto* slowdown = at(kSlowFrom - 1);
  for (std::int64_t step = kSlowFrom; step <= s.steps && slowdown; ++step) {
    const auto* l = at(step);
    if (!l || l->plan_speeds.size() != static_cast<std::size_t>(kWorkers)) continue;
    std::vector<double> others(l->plan_speeds.begin(), l->plan_speeds.begin() + kSlowRank);
    if (l->plan_speeds[kSlowRank] < 0.8 * hdp::median(others)) {
      r.rebalanced_after_steps = static_cast<int>(step - kSlowFrom);
      const auto* previous = at(step - 1);
      if (previous) r.rebalanced_after_s = (previous->time_ms - slowdown->time_ms) / 1000.0;
      break;
    }
  }
  r.ok = true;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_straggler: throughput with a half-speed worker, speed-aware planning against speed-blind"};
  Settings s;
  bool json = false;
  std::string hdp = (fs::path(argv[0]).parent_path() / "hdp").string();
  app.add_flag("--json", json, "One JSON object");
  app.add_option("--steps", s.steps, "Steps per run")->check(CLI::Range(20, 100000))->capture_default_str();
  app.add_option("--from", s.from, "First step counted in the throughput")->check(CLI::Range(11, 100000))->capture_default_str();
  app.add_option("--model", s.model, "tiny, demo, small")->capture_default_str();
  app.add_option("--context", s.context, "Context and per-rank capacity C")->capture_default_str();
  app.add_option("--batch-tokens", s.batch_tokens, "Global batch per step")->capture_default_str();
  app.add_option("--data", s.data, "Corpus directory or synthetic:NAME")->capture_default_str();
  app.add_option("--throttle-cpus", s.throttle_cpus, "CPUs the throttled worker keeps (default: cores / 4 / 2)");
  app.add_option("--hdp", hdp, "The hdp binary")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (s.from > s.steps) {
    std::cerr << "bench_straggler: --from must not exceed --steps\n";
    return 2;
  }
  const long cores = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
  if (s.throttle_cpus <= 0) s.throttle_cpus = static_cast<double>(cores) / kWorkers / 2;

  const std::string slow = "slow:a/" + std::to_string(kSlowRank) + "@" + std::to_string(kSlowFrom) + ":0.5";
  char cpus[32];
  std::snprintf(cpus, sizeof cpus, "%.3f", s.throttle_cpus);
  const std::string throttle = "throttle:a/" + std::to_string(kSlowRank) + "@" + std::to_string(kSlowFrom) + ":" + cpus;
  const bool can_throttle = !hdp::trainer::cpu_cgroup_root().empty() && ::geteuid() == 0;

  std::vector<Run> runs;
  runs.push_back(run(s, hdp, "baseline", {}));
  runs.push_back(run(s, hdp, "aware", {"--fault", slow}));
  runs.push_back(run(s, hdp, "blind", {"--fault", slow, "--no-speed-aware"}));
  if (can_throttle) {
    runs.push_back(run(s, hdp, "real-aware", {"--fault", throttle}));
    runs.push_back(run(s, hdp, "real-blind", {"--fault", throttle, "--no-speed-aware"}));
    hdp::trainer::remove_throttle_groups();
  }
  const double base = runs[0].tokens_per_s;
  bool ok = base > 0;
  nlohmann::json out = {{"model", s.model},
                        {"context", s.context},
                        {"batch_tokens", s.batch_tokens},
                        {"workers", kWorkers},
                        {"slow_worker", kSlowRank},
                        {"slow_from_step", kSlowFrom},
                        {"counted_steps", {s.from, s.steps}},
                        {"throttle_cpus", can_throttle ? nlohmann::json(s.throttle_cpus) : nlohmann::json("unavailable")},
                        {"runs", nlohmann::json::array()}};
  if (!json) {
    std::printf("model %s, context %lld, %lld tokens per step, %d workers (1 thread each) on %ld core(s); worker %d "
                "slowed from step %d; steps %d-%d counted\n",
                s.model.c_str(), static_cast<long long>(s.context), static_cast<long long>(s.batch_tokens), kWorkers,
                cores, kSlowRank, kSlowFrom, s.from, s.steps);
    std::printf("%-11s %10s %8s %13s %12s %10s\n", "run", "tokens/s", "loss", "rebalanced at", "after (s)", "speed");
  }
  for (const Run& r : runs) {
    ok = ok && r.ok;
    const double loss = base > 0 ? 1 - r.tokens_per_s / base : 0;
    out["runs"].push_back({{"name", r.name},
                           {"tokens_per_s", r.tokens_per_s},
                           {"throughput_loss", loss},
                           {"rebalanced_after_steps", r.rebalanced_after_steps ? nlohmann::json(*r.rebalanced_after_steps)
                                                                               : nlohmann::json()},
                           {"rebalanced_after_s", r.rebalanced_after_s ? nlohmann::json(*r.rebalanced_after_s)
                                                                       : nlohmann::json()},
                           {"slow_worker_relative_speed", r.slow_speed}});
    if (!json) {
      std::printf("%-11s %10.0f %7.1f%% %13s %12s %10.2f\n", r.name.c_str(), r.tokens_per_s, 100 * loss,
                  r.rebalanced_after_steps ? ("+" + std::to_string(*r.rebalanced_after_steps) + " steps").c_str() : "-",
                  r.rebalanced_after_s ? std::to_string(*r.rebalanced_after_s).substr(0, 5).c_str() : "-", r.slow_speed);
    }
  }
  auto loss_of = [&](const std::string& name) -> nlohmann::json {
    for (const Run& r : runs) {
      if (r.name == name && base > 0) return 1 - r.tokens_per_s / base;
    }
    return nullptr;
  };
  out["throughput_loss_aware"] = loss_of("aware");
  out["throughput_loss_blind"] = loss_of("blind");
  out["throughput_loss_real_aware"] = loss_of("real-aware");
  out["throughput_loss_real_blind"] = loss_of("real-blind");
  if (json) std::cout << out.dump(2) << "\n";
  if (!can_throttle && !json) std::printf("real slowdown: unavailable (no CPU cgroup this process may create)\n");
  return ok ? 0 : 1;
}
