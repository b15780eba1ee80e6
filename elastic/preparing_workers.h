// File: elastic/preparing_workers.h
//
// A joiner prepared beside the running job (docs/architecture.md): a node that joins a running
// job is admitted only once its workers have set themselves up (device, data, model buffers), so
// that the running ranks never wait in a generation's bootstrap for a joiner still building its
// model or its GPU context.
//  - The worker says `preparing` when it connects to its agent's channel and `ready` once it waits
//    for a generation (elastic/agent_channel.h); the agent's channel (agents/worker_channel.h)
//    tells the agent whether any of its workers is preparing, counting a worker it started as
//    preparing until its first line (at most agent_channel::kFirstLineGrace).
//  - The agent (PreparingWorkers) keeps keys::preparing(node, incarnation) in the store while one
//    is and its incarnation is no member of the current generation, with the lease's TTL, written
//    again at every heartbeat and before a join is announced again (a node that dies takes it with
//    its lease), and erases it once none is, and when it leaves.
//  - The leader (read_preparing) reads the key of every candidate when a running generation
//    exists, and leaves out a candidate whose key is there (membership_decision.h). The first
//    generation, a job waiting below its minimum, and a generation that would fall below it
//    without the candidate, wait for nobody's preparation: no rank runs on to be held up.
// A worker that never says either line (a command that is no hdp worker) holds its node for
// kFirstLineGrace after its start at most. A worker slower than that to speak leaves a gap in which
// its node may be admitted before it is ready, as before this mechanism.
#pragma once

#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>

#include "elastic/membership_decision.h"
#include "elastic/store.h"

namespace hdp::elastic {

// The agent's side. Not thread-safe (the agent's thread).
class PreparingWorkers {
 public:
  // Whether any of the node's workers is preparing, as its channel last said.
  void set(bool preparing) { preparing_ = preparing; }
  // Makes the store agree: the key of (node, incarnation) written with `ttl` while the workers
  // prepare and the incarnation is not `member`, else erased (once). Written again at every call
  // while wanted (the caller's heartbeat renews its TTL). Store errors propagate: the next call
  // tries again.
  void sync(Store& store, const std::string& node, const std::string& incarnation, bool member, Store::Duration ttl);
  // Whether sync() with `preparing` set would call the store (a key to write, or one to erase).
  bool would_call(bool preparing, bool member) const { return (preparing && !member) || written_.has_value(); }

 private:
  bool preparing_ = false;
  std::optional<std::string> written_;  // the key this agent wrote and has not erased
};

// The leader's side: the candidates (node, incarnation) whose workers are preparing, in one read.
std::set<std::pair<std::string, std::string>> read_preparing(Store& store, std::span<const JoinCandidate> candidates);

}  // namespace hdp::elastic
