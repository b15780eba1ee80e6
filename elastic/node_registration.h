// File: elastic/node_registration.h
//
// The agent's side of membership: a claim on the node id (node:<id> = incarnation), a lease
// lease:<id>/<incarnation> with a TTL refreshed by heartbeat(), and a join announcement for the
// leader. Each registration is a new incarnation (a random token): an agent that was paused or
// partitioned past its lease finds its lease gone (heartbeat() returns false) and must register
// again, as a new member. Because the incarnation is part of the lease's key, a heartbeat is a plain
// PEXPIRE (no script) that can never refresh another incarnation's lease. Not thread-safe; every
// call may block on the store.
#pragma once

#include <memory>
#include <optional>

#include "common/error.h"
#include "elastic/membership.h"
#include "elastic/store.h"

namespace hdp::elastic {

// Another agent with a live lease holds this node id (two agents were given one --node-id, or the
// previous agent of this node still runs). Not a usage error: `hdp agent` exits 1 for it
// (docs/errors.md), so that systemd and Slurm try again once the holder is gone.
class NodeIdInUse : public FatalError {
 public:
  using FatalError::FatalError;
};

class NodeRegistration {
 public:
  // `lease` describes the node (its incarnation is chosen at register time).
  NodeRegistration(std::shared_ptr<Store> job_store, NodeLease lease, Store::Duration ttl);

  // Claims the node id for a fresh incarnation, writes its lease and announces the join. When
  // another incarnation with a live lease holds the node id (a previous agent that died without
  // deregistering), waits up to `wait_for_previous` for that lease to expire; then throws
  // NodeIdInUse (two live agents with one node id).
  // Resumable: when a call fails part way (a store outage, a `joins` that is not a counter), the
  // next call completes the same incarnation instead of starting another: the claim is taken
  // again (a no-op while it is still ours, and it renews the lease), and the announcement reuses
  // the join number already drawn, so no hole is left for the leader to wait on. Only a call
  // after a completed registration starts a new incarnation.
  void register_new_incarnation(Store::Duration wait_for_previous);
  // Whether the last register_new_incarnation() completed (false before the first one).
  bool registered() const { return registered_; }

  // Announces this incarnation's join again, for an agent with a live lease that is not in the
  // current generation (it was dropped while alive, or a leader lost its announcement): the leader
  // takes it as a candidate again, and an identity it already knows is one candidate. Each call
  // draws a new join number; a failure leaves nothing to resume (the next call draws another).
  void announce();

  // For a lease found gone: whether the store lost the job's data (restarted without persistence,
  // flushed) rather than the lease expiring. Then the node claim is gone too, and this takes claim
  // and lease back for the same incarnation, in one commit that requires both absent, writing
  // `last_generation` into the lease so that the leader numbers the next generation above it.
  // Returns false, changing nothing, when the claim is still there: the lease expired while the
  // store kept its data (the agent was paused or cut off past it, or the store stalled or rolled
  // back: MembershipAgent tells these apart and calls reclaim()), or another agent holds the node
  // id. The caller announces the join (announce()).
  bool reestablish(std::int64_t last_generation);
  // The same for a claim still present that holds `claim` (this incarnation's, or a dead one's
  // that the store rolled back to): the commit requires the claim to hold exactly that and this
  // incarnation's lease to be absent, and writes an event `lease_restored` with `why`. False,
  // changing nothing, when either changed meanwhile.
  bool reclaim(std::int64_t last_generation, const std::string& claim, const std::string& why);

  struct Heartbeat {
    bool alive = false;                     // false: the lease is gone or someone else's (evicted)
    std::optional<std::string> leader;      // the leader key, read in the same round trip
    std::optional<std::string> generation;  // the gen key, likewise
    std::optional<std::string> control;     // the control key (pending requests, control.h), likewise
    std::optional<std::string> refusal;     // this incarnation's refusal by the leader (release.h), likewise
  };
  // Refreshes the lease (rewriting it when the healthy slots or the last generation changed) and
  // reads the leader, generation, control and refusal keys, all in one round trip without a script: at 1,536 nodes
  // that is the whole steady-state cost of a follower.
  // `rewrite`: write the lease's value even if nothing changed (`SET … XX`, so it still never
  // revives a lease that is gone), repairing a value someone else overwrote.
  Heartbeat heartbeat(const std::vector<int>& healthy, std::int64_t last_generation, bool rewrite = false);

  // Removes the claim and the lease if the node id is still this incarnation's.
  void deregister();

  const NodeLease& lease() const { return lease_; }
  std::string member_id() const { return lease_.node + "/" + lease_.incarnation; }

 private:
  std::shared_ptr<Store> store_;
  void write_announcement(std::int64_t sequence);
  // reestablish() (`claim` nullopt: the claim must be absent) and reclaim().
  bool take_back(std::int64_t last_generation, const std::optional<std::string>& claim, const char* event,
                 Fields details);

  NodeLease lease_;
  Store::Duration ttl_;
  bool registered_ = false;
  std::optional<NodeLease> pending_;        // the incarnation a registration in progress claims
  std::optional<std::int64_t> pending_join_;  // its join number, once drawn
};

// A random 64-bit token in hex.
std::string new_incarnation();

}  // namespace hdp::elastic
