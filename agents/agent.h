// File: agents/agent.h
//
// `hdp agent`: one per node. Registers the node's lease, runs one worker per slot, keeps the
// lease alive, takes part in leader election (the leader runs the MembershipController), and
// handles signals:
//   SIGTERM / SIGINT: a drain of this node (systemctl stop; `hdp drain` of this node's incarnation
//   acts alike): the workers get SIGTERM and leave at a step boundary while the job goes on
//   without this node (trainer/trainer.h);
//   SIGUSR1: a stop of the whole job (Slurm's scancel --signal; `hdp stop` acts alike): the
//   workers get SIGUSR1 and every rank of the job stops at one step boundary, with a checkpoint;
//   either way the agent waits until its workers are out (killing them at drain_timeout),
//   deregisters and returns kDrained; a second signal while it waits kills the workers and returns
//   kDrained at once.
// The control plane (registration, lease, leader candidacy, membership) is elastic::MembershipAgent
// (elastic/membership_agent.h); the workers are SupervisedWorkers (agents/supervised_workers.h),
// the generation stream's watch a GenerationWatcher (agents/generation_watcher.h); agent.cc is the
// orchestration: signals and the event loop.
// An agent whose lease was lost (paused or partitioned past it) notices at its next heartbeat,
// kills its workers (they belong to a dead incarnation), registers anew and starts them again; one
// whose lease and node claim were both lost with the store's data keeps its workers and its
// incarnation. A store outage is ridden out: ticks that fail are logged and retried on the next tick. The
// store the agent is given must give up on a call within options.timing.store_call_limit (under a
// heartbeat interval): its calls block the one thread that also handles signals and workers.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "elastic/lease_timing.h"
#include "elastic/membership.h"
#include "elastic/store.h"

namespace hdp::elastic {
class RedisStore;
}

namespace hdp::agents {

struct AgentOptions {
  std::string job;
  std::string node_id;
  std::string advertise_address;          // what workers publish to their peers
  std::string redis_url;                  // handed to workers
  std::string redis_password_file;        // handed to workers (never the password itself)
  std::string sentinel_password_file;     // likewise, for a redis+sentinel:// URL
  int slots = 1;
  elastic::JobConfig nnodes;
  // The lease and everything derived from it (heartbeat, leader lease, tick, store timeouts):
  // derived and checked in one place, elastic/lease_timing.h.
  elastic::LeaseTiming timing = elastic::derive_lease_timing(elastic::kDefaultLease, std::nullopt);
  std::chrono::milliseconds settle{1000};  // joins within this window become one generation
  int max_restarts = 3;
  // A standby worker kept ahead of need, to which a crashed worker's slot is handed
  // (agents/worker_supervisor.h).
  bool standby_worker = false;
  std::chrono::milliseconds drain_timeout{30000};
  // How long the agent rides out a store that answers no call (every heartbeat failing: the
  // primary down with no sentinel quorum to replace it, Redis gone): past it, it stops the job's
  // workers on this node (SIGUSR1: a step boundary, a final checkpoint on disk) and `hdp agent`
  // exits 1 naming the store. Zero: never.
  std::chrono::milliseconds store_outage_limit{300000};
  std::vector<std::string> worker_command;
  // Prometheus metrics on http://metrics_address:metrics_port/metrics (agents/agent_metrics.h);
  // nullopt: none. Port 0: a free one (logged).
  std::optional<int> metrics_port;
  std::string metrics_address = "0.0.0.0";
};

enum class AgentOutcome {
  kCompleted,  // the job completed (every worker exited 0)
  kJobFailed,  // a worker reported that the job failed permanently (exit 3), or that it cannot run
               // (exit 2: its configuration): do not requeue
  kRefused,    // refused by the running job, which goes on without this node (exit 5): a worker
               // differs from the job (trainer/job_identity.h), or the leader refused this node's
               // build before it joined (elastic/release.h)
  kDrained,    // stopped by a signal after draining
};

// Runs until the job completes, fails, refuses this node or the agent is drained. Throws for agent errors:
// elastic::NodeIdInUse for a node id held by another live agent (also when found on re-registering
// after an eviction), hdp::Error when every slot is out of restarts (`hdp agent` exits 1 for both),
// InvalidArgument for a job configuration that conflicts with the job's, or a metrics port in use (exit 2).
// `redis`: the RedisStore under `job_store` (null: a store of another kind). After each heartbeat
// the agent records the primary it is connected to in the job's `store_primary` and counts its
// moves in `store_failovers` (elastic/job_state.h, StorePrimaryRecord: no extra command while the
// connection did not move; a store error is logged and the step retried at the next heartbeat),
// and exports both (hdp_agent_store_primary_info, hdp_agent_store_failovers_total).
AgentOutcome run_agent(const AgentOptions& options, std::shared_ptr<elastic::Store> job_store,
                       std::shared_ptr<const elastic::RedisStore> redis = nullptr);

}  // namespace hdp::agents
