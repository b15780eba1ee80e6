// File: tests/support/reference_run.h
//
// The fault-free run a suite of the trainer's cluster tests compares its faulty runs with: one job
// of real agents and workers, run once for the whole suite (SetUpTestSuite) in a directory of its
// own, its per-step metrics read back. For tests that link hdp_agent_cluster.
//
// Example:
//   static void SetUpTestSuite() {
//     reference_ = std::make_unique<ReferenceRun>([](const auto& dir) { return options_for(dir); },
//                                                 std::vector<std::string>{"n1", "n2"}, 240s);
//   }
//   ASSERT_TRUE(reference_->ok());   reference_->loss(step), reference_->dir() / "ckpt"
#pragma once

#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "tests/agents/agent_cluster.h"
#include "tests/support/temp_dir.h"
#include "tests/trainer/run_records.h"

namespace hdp::test {

class ReferenceRun {
 public:
  // Starts an agent for each of `nodes` with the options `options_for(dir)` gives, and waits until
  // every agent exited, `timeout` in all. ok(): all exited with 0 (else their logs are printed).
  ReferenceRun(const std::function<ClusterOptions(const std::filesystem::path&)>& options_for,
               const std::vector<std::string>& nodes, std::chrono::milliseconds timeout) {
    AgentCluster cluster(options_for(dir_.path()));
    for (const auto& node : nodes) cluster.start_agent(node);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    ok_ = true;
    for (const auto& node : nodes) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      const auto status = cluster.agent(node).wait_for(std::max(left, std::chrono::milliseconds(1)));
      ok_ = ok_ && status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0;
    }
    if (!ok_) std::cerr << cluster.all_logs();
    steps_ = read_metrics(dir_.path() / "metrics.jsonl");
  }

  bool ok() const { return ok_; }
  const std::filesystem::path& dir() const { return dir_.path(); }
  // Every step's line, in the order rank 0 wrote them.
  const std::vector<StepLine>& steps() const { return steps_; }
  // The loss of `step` (1-based), as the fault-free run computed it.
  double loss(std::int64_t step) const { return steps_.at(static_cast<std::size_t>(step - 1)).loss; }

 private:
  TempDir dir_;
  bool ok_ = false;
  std::vector<StepLine> steps_;
};

}  // namespace hdp::test
