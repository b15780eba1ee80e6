// File: trainer/elastic_loop.h
//
// The worker's outer loop, shared by the smoke worker and the trainer: wait for a running
// generation that includes this worker, build that generation's communicator, run the body until
// it finishes or the generation changes; when a peer is lost (PeerLost, TimeoutError) or the
// store is briefly unreachable (StoreUnavailable), abandon the generation and wait for the next one.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>

#include "elastic/elastic_context.h"
#include "mesh/comm/communicator_factory.h"
#include "mesh/comm/data_plane.h"
#include "mesh/comm/communicator.h"

namespace hdp::trainer {

enum class BodyResult {
  kFinished,           // the job's work is done: leave the loop
  kGenerationChanged,  // a newer generation exists: rebuild and go on
};

// The body runs one generation over its communicator (connected, "main" channel). It should check
// ctx.changed(m) and `stop` at step boundaries.
using GenerationBody = std::function<BodyResult(const elastic::Membership& m, mesh::Communicator& comm)>;

struct LoopOptions {
  std::chrono::milliseconds connect_timeout{30000};  // rendezvous and every collective
  // Where this rank's tensors live (trainer/device_placement.h): the generation's data plane is
  // chosen from every rank's (mesh/comm/data_plane.h). Its host, when empty, is the advertised address.
  mesh::RankDevice device;
  // Tests: what they change in the data plane's choice (a fake NCCL); production passes none.
  mesh::DataPlaneHooks data_plane;
  std::chrono::milliseconds wait_slice{1000};        // how often waiting re-checks `stop`
  // How often a thread beside the body reads the generation number from the store, for a worker
  // without an agent's channel (with one, it looks every 20 ms at what the agent announced, which
  // costs no store read): once a newer generation is
  // published, the generation's communicator is aborted, so a body blocked in a collective with a
  // lost or frozen peer leaves it at once (PeerLost) instead of after the collective's timeout.
  // A newer generation that keeps every worker of this one (ElasticContext::keeps_every_worker:
  // the same workers, ranks possibly renumbered, perhaps with nodes that joined) does not abort
  // it: the step in flight finishes and the body sees the change at its boundary.
  std::chrono::milliseconds watch_every{200};
  // A stop or a drain asked for while this worker waits between two generations, holding the
  // job's state (its last generation ended with it staying: a node left, one joined, a peer was
  // lost), is carried out in the next generation, with the others (a final checkpoint, a hand-over
  // of its shards): the worker waits for it this long at most, and not at all once a generation
  // without it is published. The agent's drain timeout bounds it too.
  std::chrono::milliseconds stop_wait{10000};
  // The cool-down of this worker's peers should one of them hang (a generation abandoned on a
  // timeout: ElasticContext::report_broken).
  elastic::Cooldown cooldown;
};

enum class LoopResult { kFinished, kStopped };

// While the body runs, a watcher thread aborts the communicator once a generation other than the
// body's is current (LoopOptions::watch_every).
//
// Returns kFinished when the body finished, or when the job's `outcome` says completed while this
// worker waits for a generation (a worker restarted after the others finished); kStopped when
// `stop` was set (drain) while this worker held no state a next generation needs
// (LoopOptions::stop_wait). Throws what the
// body throws other than RecoverableError (peer loss, timeouts, store outages), which is handled
// here.
LoopResult run_elastic_loop(elastic::ElasticContext& ctx, const LoopOptions& options, const std::atomic<bool>& stop,
                            const GenerationBody& body);

}  // namespace hdp::trainer
