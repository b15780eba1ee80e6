// File: elastic/membership_agent.h
//
// The control-plane half of `hdp agent`, apart from processes, signals and the event loop (which
// agents/agent.cc keeps): the node's registration and lease, its leader candidacy and, while it
// leads, the MembershipController. Many instances can run in one process against one Store, which
// is how the membership convergence property is tested (tests/elastic/membership_convergence_test.cc).
//
// The caller runs heartbeat() every timing.heartbeat and, while leading() is true, lead() every
// timing.leader_tick, on one thread; it owns the node's workers and lets this class start and kill
// them through NodeWorkers. A heartbeat:
//  - renews the lease and remembers the highest generation seen (the lease carries it, so that
//    generation numbers keep rising when the store loses its data);
//  - re-announces the node's join while it has a live lease and a healthy worker but is not in the
//    current generation, whatever dropped it (membership converges from any state);
//  - contends for the leader lease;
//  - finds the lease gone while the node's claim (`node:<id>`) still names this incarnation (or a
//    dead one's: a store rolled back to before this incarnation registered) and asks whether the
//    job moved on without it before it calls itself evicted (docs/architecture.md, "The store's
//    bad days"): when the store's generation went back below the newest this agent saw (the store
//    rolled back: restored from an older snapshot, or failed over to a replica that missed the
//    last writes), or the current generation still lists this incarnation (the lease ran out
//    while nobody could reach the store: a stall), it takes its lease back for the same
//    incarnation and keeps its workers (after a rollback it announces its join at once, as after a
//    data loss). Only when a generation at least as new as any it saw was published without it
//    did the job move on: the node was evicted (it was paused or cut off past its lease), its
//    workers are killed and it registers as a new incarnation;
//  - finds the lease and the claim both gone: the store lost the job's data (restarted without
//    persistence, flushed). It re-establishes the same incarnation, claim and lease in one commit
//    that requires both absent, keeps its workers, and announces its join at once; the leader
//    republishes the live members under a generation above every earlier one, and the workers
//    move to it without a restart;
//  - completes a registration that failed part way (a store outage, `joins` of another type).
// Store outages and values that do not decode are logged and retried at the next call (the store
// must give up on a call within timing.store_call_limit); any other error propagates. A call that
// failed on the store, or took longer than timing.slow_store_call, makes the agent hold its
// judgement as leader for timing.judgement_hold from its next call that succeeds
// (MembershipController::hold_judgement): the leases that ran out meanwhile say nothing about the
// nodes. So does a call that succeeded on a reopened connection (options.store_connection) and a
// heartbeat that took this node's own lease back.
// Not thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/warn_once.h"
#include "elastic/control.h"
#include "elastic/job_state.h"
#include "elastic/leader_lease.h"
#include "elastic/lease_timing.h"
#include "elastic/generation_records.h"
#include "elastic/membership.h"
#include "elastic/membership_controller.h"
#include "elastic/node_registration.h"
#include "elastic/preparing_workers.h"
#include "elastic/release.h"
#include "elastic/store.h"

namespace hdp::elastic {

// The node's worker processes, as the agent's control plane sees them.
class NodeWorkers {
 public:
  virtual ~NodeWorkers() = default;
  // Slots whose worker is running.
  virtual std::vector<int> healthy() const = 0;
  // Starts every slot's worker for the incarnation `lease` describes.
  virtual void start_all(const NodeLease& lease) = 0;
  // Kills every worker and waits until they are gone (they belong to an evicted incarnation).
  virtual void kill_all() = 0;
};

struct MembershipAgentOptions {
  std::string job;
  NodeLease node;  // node, host, pid, version and slots; the incarnation is chosen at registration
  JobConfig nnodes;
  LeaseTiming timing;
  Store::Duration settle{1000};  // joins within this window become one generation
  // A number that changes whenever the store's connection was opened again (RedisStore::
  // reconnects()); empty: never. A reopened connection means the server restarted or failed over,
  // and what it held may have been lost or rolled back: as leader, no lease is judged for
  // timing.judgement_hold from then on, though the call that reopened it succeeded.
  std::function<int()> store_connection;
  // Null: a member is dropped when its lease runs out. Else the leader also drops at once a broken
  // generation's members whose agent process is gone (elastic/agent_presence.h).
  std::shared_ptr<const AgentPresence> presence;
};

class MembershipAgent {
 public:
  // `workers` must outlive this object.
  MembershipAgent(MembershipAgentOptions options, std::shared_ptr<Store> job_store, NodeWorkers& workers);

  // The first registration (the job's config, the node claim, the lease, the join announcement),
  // then the workers are started. Throws NodeIdInUse for a node id held by another live agent,
  // InvalidArgument for a --nnodes that conflicts with the job's or a `config` that does not
  // decode, StoreUnavailable when the store cannot be reached.
  void register_node();
  void heartbeat();
  // The generation record this agent holds: the watch applies the stream's deltas to it, the
  // membership check reads gen:<g> only when it holds no record of g, the workers get it from here.
  const std::shared_ptr<GenerationRecords>& records() const { return records_; }
  // The agent was told (GenerationWatch) that generation `g` was published: remembers it and
  // checks the membership at once (reads gen:<g> unless held, announces the join again when it is without
  // this node), as the next heartbeat would. Errors are handled as a heartbeat's.
  void notified(std::int64_t g);
  // A worker of this node said generation g broke (the agent channel). A follower whose leader's
  // agent is gone (agent_presence.h: its lease names a process with no store connection) takes
  // the leader lease over now, rather than after it runs out; the caller then leads at once.
  // Errors are handled as a heartbeat's.
  struct BreakCheck {
    bool leads = false;             // this agent leads (now, or already)
    bool leader_connected = false;  // the check ran and found the leader's agent connected: a
                                    // check a moment later may find it gone (agents/agent.cc)
  };
  BreakCheck generation_broke(std::int64_t g);
  // Whether any of the node's workers is setting itself up (its channel: agents/worker_channel.h).
  // While one is and this incarnation is no member, the store says so (elastic/preparing_workers.h)
  // and the leader does not admit the node into a running job; written now and at every heartbeat.
  // Errors are handled as a heartbeat's.
  void workers_preparing(bool preparing);
  // Whether workers_preparing(preparing) would call the store now (the caller frees the connection
  // its watch holds only then).
  bool workers_preparing_calls_store(bool preparing) const {
    return registration_.registered() && !refused_ && preparing_.would_call(preparing, member_);
  }
  // One leader tick: renews the leader lease and runs the membership controller. A no-op unless
  // leading().
  void lead();
  // A draining agent leads as any other until its workers are out: they may be the last members,
  // and the generation in which they stop the job must be published by someone.
  bool leading() const { return leader_.held(); }
  // Deregisters and gives up the leader lease; a leader first publishes the generation without
  // its node (one more tick). Errors are logged, not thrown.
  void leave();

  const NodeLease& lease() const { return registration_.lease(); }
  Store& store() const { return *store_; }  // the job's namespace
  std::string member_id() const { return registration_.member_id(); }
  std::int64_t last_generation() const { return last_generation_; }
  // The pending requests (control.h) as the last heartbeat that renewed the lease read them; a
  // value that does not decode is logged once and read as none.
  const ControlRequests& requests() const { return requests_; }
  // The leader's refusal of this incarnation (elastic/release.h: another build than the job's
  // members), as a heartbeat that renewed the lease read it: the caller then stops the node's
  // workers, leaves and exits kExitRefused. Once refused, heartbeats only renew the lease: no join
  // is announced and no leadership sought. A value that does not decode is logged once and read
  // as none.
  const std::optional<Refusal>& refused() const { return refused_; }
  // For the agent's metrics: when a heartbeat last found the lease alive and renewed it (none
  // yet: nullopt); the generation last checked, whether this incarnation is a member of it, and
  // its size.
  std::optional<std::chrono::steady_clock::time_point> last_renewed() const { return last_renewed_; }
  struct View {
    std::int64_t generation = 0;
    bool member = false;
    int world_size = 0, nodes = 0;
  };
  View view() const { return view_; }
  // Since when every store call has failed (none since: nullopt). The agent stops after
  // --store-outage-limit of it (agents/agent.h).
  std::optional<std::chrono::steady_clock::time_point> unreachable_since() const { return unreachable_since_; }

 private:
  void register_incarnation();
  void complete_registration();
  void ensure_config();
  void evicted();
  void restore_after_data_loss();
  // The lease is gone and the claim present: true when it was the store's trouble, not this
  // node's (see the header comment) and the lease was taken back (or the commit lost a race: the
  // next heartbeat looks again); false: evicted.
  bool kept_after_store_trouble(const std::optional<std::string>& generation);
  // A store call ended: `ok`, how long it took. Sets judge_after_ after trouble (see above).
  void store_call_ended(bool ok, std::chrono::steady_clock::duration took);
  // Evidence that the store lost or rolled back what it held, seen by a call that succeeded (its
  // connection was reopened; this agent's own live lease was gone): no lease is judged for
  // timing.judgement_hold from now. `why` is logged when this agent leads.
  void hold_judgement_now(const std::string& why);
  // True once per reopening of the store's connection (options_.store_connection).
  bool connection_reopened();
  void observe_generation(const std::optional<std::string>& number);
  // One tick of the controller, as leader; what it published becomes the last generation seen.
  void tick_controller();
  void check_membership(const std::optional<std::string>& value);
  // The store's preparing key made to agree with preparing_ and membership (preparing_workers.h).
  void sync_preparing();
  void contend_for_leadership(const std::optional<std::string>& holder);
  void forget_membership();
  // Runs `body`, logging store outages and values that do not decode ("<what> skipped").
  template <typename Body>
  void guarded(const char* what, Body&& body);

  MembershipAgentOptions options_;
  std::shared_ptr<Store> store_;
  NodeWorkers& workers_;
  NodeRegistration registration_;
  LeaderLease leader_;
  std::unique_ptr<MembershipController> controller_;  // while leader
  JobState job_state_;
  std::shared_ptr<GenerationRecords> records_ = std::make_shared<GenerationRecords>();
  std::int64_t last_generation_ = 0;
  // Remembers a refusal of this incarnation (refused()); true once refused.
  bool observe_refusal(const std::optional<std::string>& value);
  void observe_requests(const std::optional<std::string>& value);
  ControlRequests requests_;
  WarnOnce bad_control_;     // the last `control` value that did not decode
  std::optional<Refusal> refused_;
  WarnOnce bad_refusal_;     // the last refusal value that did not decode
  WarnOnce bad_generation_;  // the last `gen` value observe_generation() refused (kept after a good one)
  // check_membership(): the generation last read and whether this incarnation is in it; when and
  // in which generation it last announced its join.
  std::int64_t checked_generation_ = -1;
  bool member_ = false;
  PreparingWorkers preparing_;
  std::optional<std::int64_t> announced_generation_;
  std::chrono::steady_clock::time_point announced_at_{};
  std::optional<std::chrono::steady_clock::time_point> last_renewed_;
  View view_;
  bool store_trouble_ = false;  // a call failed or was slow, and none has succeeded since
  std::optional<int> connection_;  // options_.store_connection() as last seen
  std::optional<std::chrono::steady_clock::time_point> unreachable_since_;  // the first failure of an outage
  std::chrono::steady_clock::time_point judge_after_{};  // as leader, no lease is judged before this
};

}  // namespace hdp::elastic
