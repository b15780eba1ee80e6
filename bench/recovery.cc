// bench_recovery: how long the elastic trainer takes to recover from each kind of fault, how many
// steps it loses and how much it reads from disk, with real processes on this machine: a private
// redis-server, `hdp agent` processes with `hdp train` workers, faults injected by this program.
//
// Scenarios (each a fresh job):
//   node_kill      2 agents x 2 workers; the second agent SIGKILLed (its workers die with it)
//   node_processes 2 agents x 2 workers; the follower's agent and workers SIGKILLed together (the
//                  machine up: its peers' connections are reset, the leader finds its agent gone)
//   leader_processes  the same for the leader's node: the follower takes the leader lease over
//   worker_crash   2 agents x 2 workers; one worker of the second agent SIGKILLed (the agent restarts it)
//   join           1 agent x 2 workers training; a second agent started (time to its first step)
//   redis_restart  2 agents x 2 workers; the redis-server SIGKILLed and restarted empty
// Paths (node_kill and worker_crash run both, in the same invocation, on the same model):
//   memory      the default: redundant optimizer shards, the state rebuilt from the survivors'
//               memory (mesh/step/reshard.h)
//   checkpoint  --no-redundant-shards: the lost shard has no copy, every rank restores the newest
//               checkpoint (HDF5, checkpoint every 5 steps)
// recovery_s: from the fault (or the join) to the first step completed after it (for node_kill
// and join: the first step on the new world size; for worker_crash: the first step of a generation
// newer than the one before the kill, not a step in flight that happened to end after it), from
// the step times rank 0 records
// (--metrics-file, wall clock: each line's start_ms and step_ms, so that what rank 0 reports
// between a step and its line, the recovery's event after the first step among it, is not counted). steps_lost: the furthest step completed before the fault minus
// the step the job went on from. disk_bytes_read: what the ranks read from checkpoint files to
// recover (the recovery event's sum over ranks; 0 when the state came from memory). The baseline
// is the median step time before the fault, measured in the same run; the target for a node loss
// is lease + 1 s + one step. resumed_s: from the fault to the start of that first step; for node_processes and leader_processes the bound is 0.5 s
// (the failure seen through the data plane, docs/architecture.md), whatever the lease. paused_s:
// how long the running ranks made no progress: from the end of the last step completed before
// that first step to its start (a step abandoned part way counts in it); for join the bound is
// on paused_s, one step + 0.3 s (issue 44: the joiner's own time is recovery_s beside it).
//
// Models: --model demo (the default: 3.3 M parameters) or --model large (d 1024, 8 layers,
// ffn 2816: 101 M parameters, 1.2 GB of fp32 parameters and AdamW moments).
//
// --standby-worker: the agents keep a standby worker each (agents/worker_supervisor.h), to which
// worker_crash's slot is handed.
// --joiner-setup-ms MS: in join, the joiner's workers take MS longer to set up (`--fault
// setup:b/SLOT:MS`, as a GPU context or a large model's buffers would): a joiner prepared beside the
// running job is admitted once they are ready (docs/architecture.md), so paused_s should not grow.
//
// Usage: bench_recovery [--json] [--lease-ms 2000] [--model demo|large] [--scenario NAME]...
//                       [--path memory|checkpoint]... [--hdp build/bin/hdp] [--standby-worker]
//                       [--joiner-setup-ms MS]
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
  std::string scenario, path;
  double recovery_s = -1;
  double resumed_s = -1;
  double paused_s = -1;
  std::int64_t steps_lost = -1;
  std::int64_t disk_bytes_read = -1;  // -1: no recovery event seen
  std::int64_t bytes_moved = -1;      // between ranks (memory path)
  double step_s = 0;  // median step before the fault
  double bound_s = 0;
  int workers_started = 0;
};

std::int64_t last_step(const std::vector<Line>& lines, std::int64_t before_ms) {
  std::int64_t step = 0;
  for (const Line& l : lines) {
    if (l.ended() <= static_cast<double>(before_ms)) step = std::max(step, l.step);
  }
  return step;
}

double median_step_s(const std::vector<Line>& lines, std::int64_t before_ms) {
  std::vector<double> ms;
  for (const Line& l : lines) {
    if (l.ended() <= static_cast<double>(before_ms)) ms.push_back(l.step_ms);
  }
  return ms.empty() ? 0 : hdp::median(ms) / 1000.0;
}

// The end of the last step completed before `at_ms` (0: none).
double last_end_before(const std::vector<Line>& lines, double at_ms) {
  double end = 0;
  for (const Line& l : lines) {
    if (l.ended() < at_ms) end = std::max(end, l.ended());
  }
  return end;
}

// The generation of the last step completed by `at_ms` (0: none).
std::int64_t generation_at(const std::vector<Line>& lines, std::int64_t at_ms) {
  std::int64_t generation = 0;
  for (const Line& l : lines) {
    if (l.ended() <= static_cast<double>(at_ms)) generation = std::max(generation, l.generation);
  }
  return generation;
}

// The first step completed after `at_ms` (on `world` ranks when world > 0, in a generation above
// `above` when above > 0).
std::optional<Line> first_after(const std::vector<Line>& lines, std::int64_t at_ms, int world, std::int64_t above = 0) {
  for (const Line& l : lines) {
    if (l.ended() > static_cast<double>(at_ms) && (world == 0 || l.world == world) && (above == 0 || l.generation > above)) {
      return l;
    }
  }
  return std::nullopt;
}

std::vector<std::string> model_flags(const std::string& model) {
  if (model == "large") {
    return {"--model", "demo", "--d-model", "1024", "--layers", "8", "--heads", "8", "--kv-heads", "8", "--ffn-dim",
            "2816", "--context", "64", "--capacity", "64", "--batch-tokens", "128", "--max-rank-memory-mb", "0"};
  }
  return {"--model", "demo", "--context", "256", "--capacity", "256", "--batch-tokens", "2048"};
}

Result measure(const std::string& scenario, const std::string& path, const std::string& model, const std::string& hdp,
               std::chrono::milliseconds lease, const std::vector<std::string>& agent_flags, int joiner_setup_ms) {
  Result r;
  r.scenario = scenario;
  r.path = path;
  std::vector<std::string> flags = model_flags(model);
  if (scenario == "join" && joiner_setup_ms > 0) {
    for (int slot = 0; slot < 2; ++slot) {
      flags.emplace_back("--fault");
      flags.push_back("setup:b/" + std::to_string(slot) + ":" + std::to_string(joiner_setup_ms));
    }
  }
  for (const char* f : {"--steps", "100000", "--threads", "1", "--checkpoint-every", "5", "--timeout-ms", "20000",
                        "--log-every", "1000"}) {
    flags.emplace_back(f);
  }
  if (path == "checkpoint") flags.emplace_back("--no-redundant-shards");
  Job job(hdp, lease, scenario + "-" + path, flags);
  const bool join = scenario == "join";
  job.start_agent("a", 2, "1:2", agent_flags);
  if (!join) job.start_agent("b", 2, "1:2", agent_flags);
  const int world = join ? 2 : 4;
  // Past the first checkpoint (step 5), so that the checkpoint path has one to restore.
  if (!job.wait([&](const auto& lines) { return !lines.empty() && lines.back().world == world && lines.back().step >= 8; },
                600s)) {
    std::cerr << scenario << ": the job did not reach step 8\n";
    return r;
  }
  // The fault's time is read just before the call that makes it, after any lookup it needs (on a
  // machine whose cores the workers keep busy, this process may wait to be run in between).
  std::int64_t at = now_ms();
  int expect_world = 0;
  std::int64_t above = 0;  // worker_crash: the recovered step is one of a newer generation
  if (scenario == "node_kill") {
    at = now_ms();
    job.kill_agent("b");
    expect_world = 2;
  } else if (scenario == "node_processes" || scenario == "leader_processes") {
    const std::string leader = job.leader_node();
    const bool a_leads = leader == "a";
    at = now_ms();
    job.kill_node_processes((scenario == "leader_processes") == a_leads ? "a" : "b");
    expect_world = 2;
  } else if (scenario == "worker_crash") {
    const auto pids = job.workers("b");
    if (pids.empty()) {
      std::cerr << scenario << ": node b has no worker to kill\n";
      return r;
    }
    // The step in flight when the worker dies ends with it, or (the kill landing as it ends) is
    // reported: the recovery is the first step of the generation the crash brings.
    above = generation_at(read_lines(job.metrics()), now_ms());
    at = now_ms();
    kill(pids.back(), SIGKILL);
    std::cerr << scenario << ": killed worker pid " << pids.back() << " of node b (generation " << above << ")\n";
  } else if (scenario == "join") {
    at = now_ms();
    job.start_agent("b", 2, "1:2", agent_flags);
    expect_world = 4;
  } else if (scenario == "redis_restart") {
    at = now_ms();
    job.redis().restart();
  }
  job.wait([&](const auto& lines) { return first_after(lines, at, expect_world, above).has_value(); }, 600s);
  const auto lines = read_lines(job.metrics());
  const auto next = first_after(lines, at, expect_world, above);
  r.step_s = median_step_s(lines, at);
  r.bound_s = scenario.ends_with("_processes") ? 0.5
              : scenario == "join"              ? r.step_s + 0.3
                                                : lease.count() / 1000.0 + 1.0 + r.step_s;
  r.workers_started = job.workers_started();
  if (next) {
    r.recovery_s = (next->ended() - static_cast<double>(at)) / 1000.0;
    r.resumed_s = (next->started() - static_cast<double>(at)) / 1000.0;
    if (const double before = last_end_before(lines, next->started()); before > 0) {
      r.paused_s = (next->started() - before) / 1000.0;
    }
    r.steps_lost = std::max<std::int64_t>(0, last_step(lines, at) - (next->step - 1));
  }
  // The recovery events after the fault: the state came from memory ("continue") or from disk ("restore").
  try {
    for (const auto& e : job.events()) {
      auto field = [&](const char* name) {
        const auto it = e.find(name);
        return it == e.end() ? std::string() : it->second;
      };
      if (field("time_ms").empty() || std::stoll(field("time_ms")) < at) continue;
      if (field("type") != "continue" && field("type") != "restore") continue;
      if (!field("disk_bytes_read").empty()) r.disk_bytes_read = std::max<std::int64_t>(r.disk_bytes_read, 0) + std::stoll(field("disk_bytes_read"));
      if (!field("bytes_moved").empty()) r.bytes_moved = std::max<std::int64_t>(r.bytes_moved, 0) + std::stoll(field("bytes_moved"));
    }
  } catch (const std::exception& e) {
    std::cerr << scenario << ": cannot read the events: " << e.what() << "\n";
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_recovery: recovery time, steps lost and disk reads per fault, real processes on this machine"};
  bool json = false;
  int lease_ms = 2000;
  std::string model = "demo";
  std::vector<std::string> scenarios, paths;
  std::string hdp = (fs::path(argv[0]).parent_path() / "hdp").string();
  app.add_flag("--json", json, "One JSON object: {lease_ms, model, scenarios: [...]}");
  app.add_option("--lease-ms", lease_ms, "The agents' node lease")->capture_default_str();
  app.add_option("--model", model, "demo, or large (1.2 GB of parameters and optimizer state)")
      ->check(CLI::IsMember({"demo", "large"}))
      ->capture_default_str();
  app.add_option("--scenario", scenarios,
                 "node_kill, node_processes, leader_processes, worker_crash, join, redis_restart (default: all)")
      ->check(CLI::IsMember({"node_kill", "node_processes", "leader_processes", "worker_crash", "join", "redis_restart"}));
  app.add_option("--path", paths, "memory, checkpoint (default: both where both exist)")
      ->check(CLI::IsMember({"memory", "checkpoint"}));
  app.add_option("--hdp", hdp, "The hdp binary")->capture_default_str();
  bool standby = false;
  app.add_flag("--standby-worker", standby,
               "Agents keep a standby worker (hdp agent --standby-worker): a crashed worker's slot goes to it");
  int joiner_setup_ms = 0;
  app.add_option("--joiner-setup-ms", joiner_setup_ms,
                 "join: the joiner's workers take this much longer to set up (--fault setup:)")
      ->check(CLI::Range(0, 600000));
  CLI11_PARSE(app, argc, argv);
  const std::vector<std::string> agent_flags = standby ? std::vector<std::string>{"--standby-worker"}
                                                       : std::vector<std::string>{};
  if (scenarios.empty()) {
    scenarios = {"node_kill", "node_processes", "leader_processes", "worker_crash", "join", "redis_restart"};
  }
  if (paths.empty()) paths = {"memory", "checkpoint"};
  std::vector<Result> results;
  for (const auto& s : scenarios) {
    for (const auto& p : paths) {
      // A join and a store restart lose no shard: their state comes from memory with or without copies.
      if (p == "checkpoint" && (s == "join" || s == "redis_restart")) continue;
      results.push_back(measure(s, p, model, hdp, std::chrono::milliseconds(lease_ms), agent_flags, joiner_setup_ms));
    }
  }
  if (json) {
    nlohmann::json out = {{"lease_ms", lease_ms},
                          {"model", model},
                          {"standby_worker", standby},
                          {"joiner_setup_ms", joiner_setup_ms},
                          {"scenarios", nlohmann::json::array()}};
    for (const auto& r : results) {
      out["scenarios"].push_back({{"scenario", r.scenario},
                                  {"path", r.path},
                                  {"recovery_s", r.recovery_s},
                                  {"resumed_s", r.resumed_s},
                                  {"paused_s", r.paused_s},
                                  {"steps_lost", r.steps_lost},
                                  {"disk_bytes_read", r.disk_bytes_read},
                                  {"bytes_moved", r.bytes_moved},
                                  {"step_s", r.step_s},
                                  {"bound_s", r.bound_s},
                                  {"workers_started", r.workers_started}});
    }
    std::cout << out.dump(2) << "\n";
  } else {
    std::printf("lease %d ms, model %s%s; recovery from the fault to the first step completed after it\n", lease_ms,
                model.c_str(), standby ? ", standby workers" : "");
    std::printf("%-16s %-11s %11s %10s %9s %11s %16s %14s %9s %9s %16s\n", "scenario", "path", "recovery_s",
                "resumed_s", "paused_s", "steps_lost", "disk_bytes_read", "bytes_moved", "step_s", "bound_s", "workers_started");
    for (const auto& r : results) {
      std::printf("%-16s %-11s %11.2f %10.2f %9.2f %11lld %16lld %14lld %9.3f %9.2f %16d\n", r.scenario.c_str(),
                  r.path.c_str(), r.recovery_s, r.resumed_s, r.paused_s, static_cast<long long>(r.steps_lost), static_cast<long long>(r.disk_bytes_read),
                  static_cast<long long>(r.bytes_moved), r.step_s, r.bound_s, r.workers_started);
    }
  }
  bool ok = true;
  for (const auto& r : results) ok = ok && r.recovery_s >= 0;
  return ok ? 0 : 1;
}
