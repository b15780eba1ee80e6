// File: agents/supervised_workers.h
//
// The node's workers as the control plane sees them (elastic::NodeWorkers,
// elastic/membership_agent.h): the WorkerSupervisor's processes (agents/worker_supervisor.h),
// each started with the worker contract's environment (elastic/worker_env.h) for the incarnation
// being started: the agent's own environment with every variable of the contract replaced by this
// agent's values, so its flags win over what it inherited. With metrics, each worker gets its own
// metrics file, and the metrics of a slot whose worker is gone are dropped (a new process starts
// with nothing of its predecessor's). Single-threaded, as the supervisor: the agent's Asio thread.
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "agents/agent.h"
#include "agents/agent_metrics.h"
#include "agents/worker_channel.h"
#include "agents/worker_supervisor.h"
#include "elastic/membership_agent.h"

namespace hdp::agents {

class SupervisedWorkers final : public elastic::NodeWorkers {
 public:
  // `metrics` may be null (no metrics). `node_directory`: HDP_NODE_DIR (agents/node_directory.h;
  // empty: none). Every other argument must outlive this object.
  SupervisedWorkers(const AgentOptions& options, WorkerSupervisor& supervisor, AgentMetrics* metrics,
                    WorkerChannel& channel, std::filesystem::path node_directory)
      : options_(options),
        supervisor_(supervisor),
        metrics_(metrics),
        channel_(channel),
        node_directory_(std::move(node_directory)) {}

  std::vector<int> healthy() const override { return supervisor_.healthy(); }
  void kill_all() override { supervisor_.kill_and_reap_all(); }
  void start_all(const elastic::NodeLease& lease) override;

  // After the supervisor reaped: the metrics of every slot with no running worker are dropped.
  void forget_gone() const;

 private:
  // The whole environment of the worker of `slot` for `incarnation` (of the standby for
  // WorkerSupervisor::kStandbySlot: the node's, for local rank 0, with HDP_STANDBY=1).
  std::vector<std::string> worker_environment(const std::string& incarnation, int slot) const;

  const AgentOptions& options_;
  WorkerSupervisor& supervisor_;
  AgentMetrics* metrics_;
  WorkerChannel& channel_;  // told of every worker started for a slot (WorkerChannel::expect_worker)
  const std::filesystem::path node_directory_;
};

}  // namespace hdp::agents
