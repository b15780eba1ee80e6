// File: tests/support/reference_run.h
//
// The fault-free run a suite of the trainer's cluster tests compares its faulty runs with: one job
// of real agents and workers, run once for the whole suite (SetUpTestSuite) in a directory of its
// own, its per-step metrics read back. For tests that link hdp_agent_cluster.
//
// Given a cache name, the run is shared by every test process of the build (tests/support/
// run_cache.h): CTest runs each case of a suite as its own process, and the job is deterministic
// (the suites assert that bitwise), so the first case computes it and the others read it. Its key
// is the cluster options (given one fixed directory, the same in every process) and the nodes.
//
// Example:
//   static void SetUpTestSuite() {
//     reference_ = std::make_unique<ReferenceRun>([](const auto& dir) { return options_for(dir); },
//                                                 std::vector<std::string>{"n1", "n2"}, 240s,
//                                                 "trainer-cluster");
//   }
//   ASSERT_TRUE(reference_->ok());   reference_->loss(step), reference_->dir() / "ckpt"
#pragma once

#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "tests/agents/agent_cluster.h"
#include "tests/support/run_cache.h"
#include "tests/trainer/run_records.h"

namespace hdp::test {

class ReferenceRun {
 public:
  // Starts an agent for each of `nodes` with the options `options_for(dir)` gives, and waits until
  // every agent exited, `timeout` in all. ok(): all exited with 0 (else their logs are printed).
  // A `cache_name` shares the run between the build's test processes (see above); a case waits up
  // to `timeout` more for another process's run of it.
  ReferenceRun(const std::function<ClusterOptions(const std::filesystem::path&)>& options_for,
               const std::vector<std::string>& nodes, std::chrono::milliseconds timeout,
               const std::string& cache_name = {})
      : entry_(cache_name.empty() ? std::make_unique<RunCacheEntry>("", "", timeout)
                                  : std::make_unique<RunCacheEntry>(cache_name, recipe(options_for, nodes), timeout)) {
    ok_ = entry_->complete() || run(options_for(dir()), nodes, timeout);
    if (ok_) entry_->commit();
    steps_ = read_metrics(dir() / "metrics.jsonl");
  }

  bool ok() const { return ok_; }
  const std::filesystem::path& dir() const { return entry_->dir(); }
  // Every step's line, in the order rank 0 wrote them.
  const std::vector<StepLine>& steps() const { return steps_; }
  // The loss of `step` (1-based), as the fault-free run computed it.
  double loss(std::int64_t step) const { return steps_.at(static_cast<std::size_t>(step - 1)).loss; }

 private:
  static bool run(const ClusterOptions& options, const std::vector<std::string>& nodes,
                  std::chrono::milliseconds timeout) {
    AgentCluster cluster(options);
    for (const auto& node : nodes) cluster.start_agent(node);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    bool ok = true;
    for (const auto& node : nodes) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      const auto status = cluster.agent(node).wait_for(std::max(left, std::chrono::milliseconds(1)));
      ok = ok && status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0;
    }
    if (!ok) std::cerr << cluster.all_logs();
    return ok;
  }

  // Everything the run depends on besides the hdp binary: the options for one fixed directory (the
  // real one differs between processes) and the nodes.
  static std::string recipe(const std::function<ClusterOptions(const std::filesystem::path&)>& options_for,
                            const std::vector<std::string>& nodes) {
    const ClusterOptions o = options_for("/reference-run-directory");
    std::string text = "lease=" + std::to_string(o.lease.count()) + " settle=" + std::to_string(o.settle.count()) +
                       " nnodes=" + o.nnodes + " nproc=" + std::to_string(o.nproc) +
                       " steps=" + std::to_string(o.steps) + " step_ms=" + std::to_string(o.step_ms) +
                       " worker_timeout=" + std::to_string(o.worker_timeout.count()) + " redis_url=" + o.redis_url;
    for (const auto* list : {&o.train_args, &o.redis_args, &nodes}) {
      text += "\n";
      for (const auto& item : *list) text += item + '\0';
    }
    return text;
  }

  std::unique_ptr<RunCacheEntry> entry_;
  bool ok_ = false;
  std::vector<StepLine> steps_;
};

}  // namespace hdp::test
