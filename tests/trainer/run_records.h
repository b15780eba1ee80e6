// File: tests/trainer/run_records.h
//
// What the trainer's cluster tests read back from a run: rank 0's metrics file (every executed
// step's exact loss, world size and data position after it) and the newest checkpoint's three
// buffers, whole (in the layout of the model its manifest records).
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <functional>
#include <map>
#include <sstream>

#include "tests/agents/agent_cluster.h"

#include "elastic/job_state.h"
#include "checkpoint/checkpoint_root.h"
#include "checkpoint/group.h"
#include "checkpoint/manifest.h"
#include "checkpoint/restorer.h"
#include "checkpoint/state.h"
#include "trainer/hf_model.h"
#include "trainer/trainer_config.h"
#include "trainer/training_setup.h"

namespace hdp::test {

struct StepLine {
  std::int64_t step = 0;
  double loss = 0;
  int world = 0;
  checkpoint::DataPosition data;  // after the step
  std::int64_t time_ms = 0;       // when rank 0 wrote the line (Unix milliseconds)
};

inline std::vector<StepLine> read_metrics(const std::filesystem::path& path) {
  std::vector<StepLine> lines;
  std::ifstream in(path);
  for (std::string text; std::getline(in, text);) {
    const auto j = nlohmann::json::parse(text);
    lines.push_back({j.at("step").get<std::int64_t>(), j.at("loss").get<double>(), j.at("world_size").get<int>(),
                     {j.at("data_epoch").get<std::uint64_t>(), j.at("data_sample").get<std::uint64_t>()},
                     j.at("time_ms").get<std::int64_t>()});
  }
  return lines;
}

struct Final {
  std::int64_t step = 0;
  std::vector<float> params, m, v;
};

// The newest valid checkpoint under `root` (a --checkpoint-dir), whole, in the layout of the
// model the newest committed checkpoint's manifest records (the tiny model when there is none).
inline Final read_final(const std::filesystem::path& root) {
  trainer::TrainerConfig config;
  const auto committed = checkpoint::list_committed(root);
  config.model = committed.empty() ? trainer::model_preset("tiny")
                                   : trainer::model_from_manifest(checkpoint::read_manifest(committed.back().path).model_config);
  const checkpoint::FlatLayout layout = trainer::checkpoint_layout(config.model);
  Final f;
  f.params.resize(static_cast<std::size_t>(layout.total()));
  f.m.resize(f.params.size());
  f.v.resize(f.params.size());
  checkpoint::CheckpointOptions options;
  options.root = root;
  options.model_config = config.model_json();
  checkpoint::SoloGroup solo;
  const checkpoint::ShardTarget target{{0, layout.total()}, {std::span(f.params), std::span(f.m), std::span(f.v)}};
  const auto progress = checkpoint::restore_latest(options, layout, solo, target);
  EXPECT_TRUE(progress.has_value()) << "no checkpoint under " << root;
  if (progress) f.step = progress->step;
  return f;
}

// Every step 1..`steps` has a line (`ran`), except one that a new generation rolled forward while
// no rank had its loss (each failed before the loss was reduced; a rank 0 that did not run the
// step reports it from another rank's figures): the trainer logs that it cannot report it
// (trainer/recovery.cc), and `logs` must say so for each such step.
inline void expect_every_step_ran(const std::function<bool(std::int64_t)>& ran, std::int64_t steps,
                                  const std::string& logs) {
  for (std::int64_t step = 1; step <= steps; ++step) {
    if (ran(step)) continue;
    EXPECT_NE(logs.find("step " + std::to_string(step) + " was rolled forward; its loss is known to no rank"),
              std::string::npos)
        << "step " << step << " was never run";
  }
}

// Waits until every agent of `nodes` exited, `timeout` in all; their exit codes (-1: did not
// exit, or not by exit()).
inline std::map<std::string, int> wait_for_agents(AgentCluster& cluster, const std::vector<std::string>& nodes,
                                                  std::chrono::milliseconds timeout) {
  std::map<std::string, int> codes;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (const auto& node : nodes) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    const auto status = cluster.agent(node).wait_for(std::max(left, std::chrono::milliseconds(1)));
    codes[node] = status && WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
  }
  return codes;
}

// What the store's trouble must not cost, read from the agents' logs: a worker started again
// (beyond the `workers` first starts), a node evicted, a generation published without members.
// The job's events, oldest first, each as its fields (`type`, `step`, ...).
using JobEvent = std::map<std::string, std::string>;
inline std::vector<JobEvent> job_events(AgentCluster& cluster) {
  std::vector<JobEvent> out;
  elastic::JobState job(cluster.store());
  for (const auto& e : job.snapshot(elastic::kEventsKept).events) out.emplace_back(e.fields.begin(), e.fields.end());
  return out;
}

// No worker acted on a generation older than (or the same as) one it had acted on: the numbers in
// its "worker NODE/LOCAL: generation G: rank R of W" lines rise strictly.
inline void expect_generations_increase_per_worker(const std::string& logs) {
  std::map<std::string, std::pair<std::int64_t, std::string>> last;  // worker -> its last generation, line
  std::istringstream lines(logs);
  for (std::string line; std::getline(lines, line);) {
    const auto who = line.find("worker ");
    const auto gen = line.find(": generation ", who == std::string::npos ? 0 : who);
    if (who == std::string::npos || gen == std::string::npos) continue;
    const auto rank = line.find(": rank ", gen + 13);
    if (rank == std::string::npos || rank == gen + 13 ||
        line.find_first_not_of("0123456789", gen + 13) != rank) {
      continue;  // another line about a generation ("generation 3: allreduce #4: peer lost: rank 5 ...")
    }
    const std::string worker = line.substr(who + 7, gen - who - 7);
    const std::int64_t g = std::stoll(line.substr(gen + 13, rank - gen - 13));
    const auto [it, first] = last.emplace(worker, std::pair(g, line));
    if (!first) {
      EXPECT_GT(g, it->second.first) << "worker " << worker << " acted on generation " << g << " after "
                                     << it->second.first << ":\n" << it->second.second << "\n" << line;
      it->second = {g, line};
    }
  }
  EXPECT_FALSE(last.empty()) << "no worker's generation line in the logs";
}

inline void expect_no_worker_restarted(const std::string& logs, std::size_t workers) {
  EXPECT_EQ(logs.find("restarting workers"), std::string::npos) << logs;
  EXPECT_EQ(logs.find("(evicted)"), std::string::npos) << logs;
  EXPECT_EQ(logs.find(": 0 node(s), world size 0"), std::string::npos) << logs;
  std::size_t starts = 0;
  for (auto at = logs.find(" started (pid "); at != std::string::npos; at = logs.find(" started (pid ", at + 1)) ++starts;
  EXPECT_EQ(starts, workers) << "a worker was started again";
}

}  // namespace hdp::test
