// File: tests/agents/agent_cluster.h
//
// A job on loopback for multi-process tests: a private redis-server, `hdp agent` processes
// started and killed by the test (each with smoke workers), and an observer connection that
// reads generations, leases and state straight from Redis.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "elastic/membership.h"
#include "elastic/store.h"
#include "tests/support/child_process.h"
#include "tests/support/redis_server.h"
#include "tests/support/temp_dir.h"

namespace hdp::test {

struct ClusterOptions {
  std::chrono::milliseconds lease{2000};
  std::chrono::milliseconds settle{300};
  std::string nnodes = "1:16";
  int nproc = 2;
  int steps = 1000000;  // the smoke job runs until the test ends unless told otherwise
  int step_ms = 20;
  std::chrono::milliseconds worker_timeout{3000};  // the smoke workers' rendezvous and collective timeout
  // The worker command after `hdp train`; empty: the smoke worker with the options above.
  std::vector<std::string> train_args;
  std::vector<std::string> redis_args;  // more redis-server arguments (ACL users)
  // Not empty: the agents and the observer use this Redis (a redis+sentinel:// URL of a
  // SentinelCluster) and no private redis-server is started (redis() must not be called).
  std::string redis_url;
};

class AgentCluster {
 public:
  explicit AgentCluster(ClusterOptions options = {});
  ~AgentCluster();

  RedisServer& redis() { return *redis_; }
  // The URL the agents are given: options().redis_url, else the private server's.
  std::string redis_url() const { return options_.redis_url.empty() ? redis_->url() : options_.redis_url; }
  const std::string& job() const { return job_; }
  std::string hdp() const;
  const ClusterOptions& options() const { return options_; }

  // Starts `hdp agent --node-id <node>`; extra flags go before the worker command, `env`
  // ("NAME=value") is added to its environment. `nproc` overrides options().nproc for this agent.
  ChildProcess& start_agent(const std::string& node, std::vector<std::string> extra = {},
                            std::vector<std::string> env = {}, std::optional<int> nproc = std::nullopt);
  ChildProcess& agent(const std::string& node) { return *agents_.at(node); }
  // The agent's worker processes: its children that have not exited (read from /proc), ascending.
  std::vector<pid_t> worker_pids(const std::string& node);
  std::string agent_log(const std::string& node) const;
  std::string all_logs() const;

  // Observer reads (a fresh connection per call keeps the observer immune to Redis restarts).
  std::int64_t generation();
  std::optional<elastic::Generation> current();
  std::map<std::string, std::string> state();
  std::optional<std::string> leader();
  std::optional<std::string> get(const std::string& key);
  std::shared_ptr<elastic::Store> store();

  // Polls `predicate` every 20 ms; returns the seconds it took, or -1 after `timeout`.
  double wait_until(const std::function<bool()>& predicate, std::chrono::milliseconds timeout);
  // Waits until the agent of one of `nodes` is no longer running (a kill-node fault); returns that
  // node, or "" after `timeout`.
  std::string wait_for_dead_agent(const std::vector<std::string>& nodes, std::chrono::milliseconds timeout);
  // Waits for a running generation whose nodes are exactly `nodes` (in any order).
  double wait_for_members(std::vector<std::string> nodes, std::chrono::milliseconds timeout);
  std::int64_t step();

 private:
  ClusterOptions options_;
  TempDir dir_;
  std::unique_ptr<RedisServer> redis_;
  std::string job_;
  std::map<std::string, std::unique_ptr<ChildProcess>> agents_;
};

std::vector<std::string> node_names(const elastic::Generation& generation);

// `hdp train` flags for a long job of the tiny model on synthetic documents (context and capacity
// 128, 1 thread a worker, collective timeout 3 s), checkpointing into `checkpoints` every
// `checkpoint_every` steps; `extra` flags follow.
std::vector<std::string> tiny_trainer_args(const std::string& checkpoints, std::int64_t batch_tokens,
                                           int checkpoint_every, std::vector<std::string> extra = {});

// Waits for the job to make `steps` more steps of progress (the smoke workers are training).
void expect_progress(AgentCluster& cluster, std::int64_t steps, std::chrono::milliseconds within);
// Starts one agent per node and waits until they train together.
void start_training(AgentCluster& cluster, const std::vector<std::string>& nodes);

// The workers an agent's log says it started ("worker <slot> started (pid <pid>)"), in order:
// (slot, pid) pairs; a slot seen twice had its worker restarted.
std::vector<std::pair<int, pid_t>> started_workers(const std::string& agent_log);

}  // namespace hdp::test
