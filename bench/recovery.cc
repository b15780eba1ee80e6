// bench_recovery: how long the elastic trainer takes to recover from each kind of fault, and how
// many steps it loses, with real processes on this machine: a private redis-server, `hdp agent`
// processes with `hdp train` workers (the demo model), faults injected by this program.
//
// Scenarios (each a fresh job):
//   node_kill      2 agents x 2 workers; the second agent SIGKILLed (its workers die with it)
//   worker_crash   2 agents x 2 workers; one worker of the second agent SIGKILLed (the agent restarts it)
//   join           1 agent x 2 workers training; a second agent started (time to its first step)
//   redis_restart  2 agents x 2 workers; the redis-server SIGKILLed and restarted empty
// recovery_s: from the fault (or the join) to the first step completed after it (for node_kill
// and join: the first step on the new world size), from the step times rank 0 records
// (--metrics-file, wall clock). steps_lost: the furthest step completed before the fault minus
// the step the job went on from. The baseline is the median step time before the fault, measured
// in the same run; the target for a node loss is lease + 2 s + one step.
//
// Usage: bench_recovery [--json] [--lease-ms 2000] [--scenario NAME]... [--hdp build/bin/hdp]
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "bench/trainer_job.h"
#include "common/median.h"
#include "elastic/job_state.h"

namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using hdp::bench::Job;
using hdp::bench::Line;
using hdp::bench::read_lines;
using hdp::elastic::now_ms;

struct Result {
  std::string scenario;
  double recovery_s = -1;
  std::int64_t steps_lost = -1;
  double step_s = 0;  // median step before the fault
  double bound_s = 0;
  int workers_started = 0;
};

std::int64_t last_step(const std::vector<Line>& lines, std::int64_t before_ms) {
  std::int64_t step = 0;
  for (const Line& l : lines) {
    if (l.time_ms <= before_ms) step = std::max(step, l.step);
  }
  return step;
}

double median_step_s(const std::vector<Line>& lines, std::int64_t before_ms) {
  std::vector<double> ms;
  for (const Line& l : lines) {
    if (l.time_ms <= before_ms) ms.push_back(l.step_ms);
  }
  return ms.empty() ? 0 : hdp::median(ms) / 1000.0;
}

// The first step completed after `at_ms` (on `world` ranks when world > 0).
std::optional<Line> first_after(const std::vector<Line>& lines, std::int64_t at_ms, int world) {
  for (const Line& l : lines) {
    if (l.time_ms > at_ms && (world == 0 || l.world == world)) return l;
  }
  return std::nullopt;
}

Result measure(const std::string& scenario, const std::string& hdp, std::chrono::milliseconds lease) {
  Result r;
  r.scenario = scenario;
  Job job(hdp, lease, scenario,
          {"--model", "demo", "--steps", "100000", "--context", "256", "--capacity", "256", "--batch-tokens", "2048",
           "--threads", "1", "--checkpoint-every", "5", "--timeout-ms", "5000", "--log-every", "1000"});
  const bool join = scenario == "join";
  job.start_agent("a", 2, "1:2");
  if (!join) job.start_agent("b", 2, "1:2");
  const int world = join ? 2 : 4;
  if (!job.wait([&](const auto& lines) { return !lines.empty() && lines.back().world == world && lines.back().step >= 12; },
                180s)) {
    std::cerr << scenario << ": the job did not reach step 12\n";
    return r;
  }
  const std::int64_t at = now_ms();
  int expect_world = 0;
  if (scenario == "node_kill") {
    job.kill_agent("b");
    expect_world = 2;
  } else if (scenario == "worker_crash") {
    const auto pids = job.workers("b");
    if (!pids.empty()) kill(pids.back(), SIGKILL);
  } else if (scenario == "join") {
    job.start_agent("b", 2, "1:2");
    expect_world = 4;
  } else if (scenario == "redis_restart") {
    job.redis().restart();
  }
  job.wait([&](const auto& lines) { return first_after(lines, at, expect_world).has_value(); }, 120s);
  const auto lines = read_lines(job.metrics());
  const auto next = first_after(lines, at, expect_world);
  r.step_s = median_step_s(lines, at);
  r.bound_s = lease.count() / 1000.0 + 2.0 + r.step_s;
  r.workers_started = job.workers_started();
  if (next) {
    r.recovery_s = (next->time_ms - at) / 1000.0;
    r.steps_lost = std::max<std::int64_t>(0, last_step(lines, at) - (next->step - 1));
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_recovery: recovery time and steps lost per fault, real processes on this machine"};
  bool json = false;
  int lease_ms = 2000;
  std::vector<std::string> scenarios;
  std::string hdp = (fs::path(argv[0]).parent_path() / "hdp").string();
  app.add_flag("--json", json, "One JSON object: {lease_ms, scenarios: [...]}");
  app.add_option("--lease-ms", lease_ms, "The agents' node lease")->capture_default_str();
  app.add_option("--scenario", scenarios, "node_kill, worker_crash, join, redis_restart (default: all)");
  app.add_option("--hdp", hdp, "The hdp binary")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (scenarios.empty()) scenarios = {"node_kill", "worker_crash", "join", "redis_restart"};
  std::vector<Result> results;
  for (const auto& s : scenarios) {
    if (s != "node_kill" && s != "worker_crash" && s != "join" && s != "redis_restart") {
      std::cerr << "bench_recovery: unknown scenario '" << s << "'\n";
      return 2;
    }
    results.push_back(measure(s, hdp, std::chrono::milliseconds(lease_ms)));
  }
  if (json) {
    nlohmann::json out = {{"lease_ms", lease_ms}, {"scenarios", nlohmann::json::array()}};
    for (const auto& r : results) {
      out["scenarios"].push_back({{"scenario", r.scenario},
                                  {"recovery_s", r.recovery_s},
                                  {"steps_lost", r.steps_lost},
                                  {"step_s", r.step_s},
                                  {"bound_s", r.bound_s},
                                  {"workers_started", r.workers_started}});
    }
    std::cout << out.dump(2) << "\n";
  } else {
    std::printf("lease %d ms; recovery from the fault to the first step completed after it\n", lease_ms);
    std::printf("%-14s %11s %11s %9s %13s %16s\n", "scenario", "recovery_s", "steps_lost", "step_s",
                "bound_s", "workers_started");
    for (const auto& r : results) {
      std::printf("%-14s %11.2f %11lld %9.3f %13.2f %16d\n", r.scenario.c_str(), r.recovery_s,
                  static_cast<long long>(r.steps_lost), r.step_s, r.bound_s, r.workers_started);
    }
  }
  bool ok = true;
  for (const auto& r : results) ok = ok && r.recovery_s >= 0;
  return ok ? 0 : 1;
}
