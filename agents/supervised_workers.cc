// File: agents/supervised_workers.cc
//
// The node's workers for the control plane: see supervised_workers.h.
#include "agents/supervised_workers.h"

#include <unistd.h>

#include <algorithm>

#include "elastic/worker_env.h"

namespace hdp::agents {

void SupervisedWorkers::start_all(const elastic::NodeLease& lease) {
  // Every worker that takes a slot (a restart, a standby handed the slot) is expected on the
  // channel; the standby itself speaks there only once it has a slot.
  supervisor_.start_all(
      [this, incarnation = lease.incarnation](int slot) { return worker_environment(incarnation, slot); },
      [this](int) { channel_.expect_worker(); });
}

void SupervisedWorkers::forget_gone() const {
  if (!metrics_) return;
  const auto healthy = supervisor_.healthy();
  for (int slot = 0; slot < options_.slots; ++slot) {
    if (std::find(healthy.begin(), healthy.end(), slot) == healthy.end()) metrics_->worker_gone(slot);
  }
}

std::vector<std::string> SupervisedWorkers::worker_environment(const std::string& incarnation, int slot) const {
  elastic::WorkerEnvironment values;
  values.job = options_.job;
  values.redis_url = options_.redis_url;
  values.redis_password_file = options_.redis_password_file;
  values.sentinel_password_file = options_.sentinel_password_file;
  values.node_id = options_.node_id;
  values.incarnation = incarnation;
  values.standby = slot == WorkerSupervisor::kStandbySlot;
  values.local_rank = values.standby ? 0 : slot;
  values.nproc_per_node = options_.slots;
  values.advertise_address = options_.advertise_address;
  values.agent_pid = static_cast<int>(getpid());
  values.agent_channel = channel_.name();
  values.node_dir = node_directory_.string();
  if (metrics_ && !values.standby) {
    metrics_->worker_gone(slot);  // a new process: nothing of its predecessor's
    values.metrics_file = metrics_->worker_file(slot).string();
  }
  return elastic::worker_environment(values, environ);
}

}  // namespace hdp::agents
