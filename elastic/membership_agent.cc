#include "elastic/membership_agent.h"

#include <algorithm>

#include "common/error.h"
#include "common/log.h"
#include "common/text.h"
#include "elastic/generation_watch.h"
#include "elastic/job_keys.h"

namespace hdp::elastic {

MembershipAgent::MembershipAgent(MembershipAgentOptions options, std::shared_ptr<Store> job_store, NodeWorkers& workers)
    : options_(std::move(options)),
      store_(std::move(job_store)),
      workers_(workers),
      registration_(store_, options_.node, options_.timing.lease),
      leader_(store_, "", options_.timing.leader_lease),
      job_state_(store_) {}

template <typename Body>
void MembershipAgent::guarded(const char* what, Body&& body) {
  const auto began = std::chrono::steady_clock::now();
  try {
    body();
    store_call_ended(true, std::chrono::steady_clock::now() - began);
  } catch (const StoreUnavailable& e) {
    store_call_ended(false, std::chrono::steady_clock::now() - began);
    log()->warn("node {}: {} skipped, store unavailable: {}", options_.node.node, what, e.what());
  } catch (const InvalidArgument& e) {
    log()->error("node {}: {} skipped: {}", options_.node.node, what, e.what());
  }
}

// The store's trouble (a failed call, or one slower than a heartbeat's budget allows) makes every
// lease doubtful: the leader judges none before a whole lease has passed since the store answered
// again, so that every live agent has renewed, or taken back, its lease by then.
void MembershipAgent::store_call_ended(bool ok, std::chrono::steady_clock::duration took) {
  if (!ok && !unreachable_since_) unreachable_since_ = std::chrono::steady_clock::now();
  if (ok) unreachable_since_.reset();
  if (!ok || took > options_.timing.slow_store_call) {
    store_trouble_ = true;
    return;
  }
  if (connection_reopened()) return hold_judgement_now("the store's connection was opened again");
  if (!store_trouble_) return;
  store_trouble_ = false;
  hold_judgement_now("the store answers again after trouble");
}

void MembershipAgent::hold_judgement_now(const std::string& why) {
  store_trouble_ = false;
  judge_after_ = std::chrono::steady_clock::now() + options_.timing.judgement_hold;
  if (leading()) {
    log()->warn("node {}: {}; as leader, judging no lease for {} ms", options_.node.node, why,
                options_.timing.judgement_hold.count());
  }
}

bool MembershipAgent::connection_reopened() {
  if (!options_.store_connection) return false;
  const int seen = options_.store_connection();
  const bool reopened = connection_ && *connection_ != seen;
  connection_ = seen;
  return reopened;
}

void MembershipAgent::register_node() {
  register_incarnation();
  log()->info("node {} registered (incarnation {}, {} slot(s)) in job {}", options_.node.node, lease().incarnation,
              options_.node.slots, options_.job);
  workers_.start_all(lease());
}

// A new incarnation: the job's config (again, in case the store lost it), a fresh lease, and a
// leader candidacy under the new member id.
void MembershipAgent::register_incarnation() {
  ensure_config();
  registration_.register_new_incarnation(options_.timing.registration_wait);
  leader_ = LeaderLease(store_, registration_.member_id(), options_.timing.leader_lease);
  controller_.reset();
  forget_membership();
  announced_at_ = std::chrono::steady_clock::now();  // the registration announced its join
}

// Registers a new incarnation after an eviction, or completes one that failed part way (each
// retry resumes the same incarnation), and only then starts the workers.
void MembershipAgent::complete_registration() {
  register_incarnation();
  log()->info("node {}: re-registered as incarnation {}", options_.node.node, lease().incarnation);
  workers_.start_all(lease());
}

// What check_membership() knows is about the store as it was: start again, due to announce.
void MembershipAgent::forget_membership() {
  checked_generation_ = -1;
  member_ = false;
  announced_generation_.reset();
  announced_at_ = {};
}

// The first agent writes the job's --nnodes; later agents must agree, so that no two leaders
// ever apply different limits.
void MembershipAgent::ensure_config() {
  const std::string wanted = encode(options_.nnodes);
  if (store_->compare_and_set(keys::kConfig, std::nullopt, wanted)) return;
  auto stored = store_->get(keys::kConfig);
  if (!stored) return ensure_config();  // erased between our two calls
  JobConfig existing = decode_job_config(*stored, keys::kConfig);
  if (existing.min_nodes != options_.nnodes.min_nodes || existing.max_nodes != options_.nnodes.max_nodes) {
    throw InvalidArgument("job '" + options_.job + "' runs with --nnodes " + std::to_string(existing.min_nodes) + ":" +
                          std::to_string(existing.max_nodes) + ", this agent was given " +
                          std::to_string(options_.nnodes.min_nodes) + ":" + std::to_string(options_.nnodes.max_nodes));
  }
}

void MembershipAgent::workers_preparing(bool preparing) {
  preparing_.set(preparing);
  if (!workers_preparing_calls_store(preparing)) return;  // no store call: nothing to count as one
  guarded("the workers' preparation", [&] { sync_preparing(); });
}

void MembershipAgent::sync_preparing() {
  preparing_.sync(*store_, options_.node.node, lease().incarnation, member_, options_.timing.lease);
}

void MembershipAgent::heartbeat() {
  guarded("heartbeat", [&] {
    // A re-registration that failed part way (a store outage, garbage in `joins`) is completed
    // first: until then this node has no workers and nothing to heartbeat for.
    if (!registration_.registered()) return complete_registration();
    auto beat = registration_.heartbeat(workers_.healthy(), last_generation_);
    if (beat.alive) {
      last_renewed_ = std::chrono::steady_clock::now();
      observe_generation(beat.generation);
      observe_requests(beat.control);
      if (observe_refusal(beat.refusal)) return;  // the caller leaves; nothing more to announce or lead
      check_membership(beat.generation);
      contend_for_leadership(beat.leader);
      return sync_preparing();
    }
    if (registration_.reestablish(last_generation_)) return restore_after_data_loss();
    if (kept_after_store_trouble(beat.generation)) return;
    evicted();
  });
}

bool MembershipAgent::kept_after_store_trouble(const std::optional<std::string>& generation) {
  const std::string& node = options_.node.node;
  const std::string incarnation = lease().incarnation;
  const auto claim = store_->get(keys::node(node));
  if (!claim) return false;  // gone since reestablish() looked: evicted() registers anew
  std::int64_t stored = 0;
  if (generation) {
    try {
      stored = decode_generation_number(*generation, keys::kGeneration);
    } catch (const InvalidArgument&) {
      return true;  // observe_generation() logs it; look again at the next heartbeat
    }
  }
  std::string why;
  if (stored < last_generation_) {
    why = "the store's generation went back from " + std::to_string(last_generation_) + " to " +
          std::to_string(stored) + " (it rolled back)";
  } else if (*claim != incarnation) {
    return false;  // another incarnation registered this node id since
  } else {
    check_membership(generation);
    if (!member_ || checked_generation_ != stored) return false;  // the job moved on without this node
    why = "generation " + std::to_string(stored) + " still lists this incarnation (the store could not be reached)";
  }
  // A claim of another incarnation is taken over only when that one is dead (no lease).
  if (*claim != incarnation && store_->get(keys::lease(node, *claim))) return false;
  if (!registration_.reclaim(last_generation_, *claim, why)) return true;  // changed meanwhile: look again
  log()->warn("node {}: the lease of incarnation {} was gone, but {}: took it back and kept the workers", node,
              incarnation, why);
  // The store lost or expired a live agent's lease: the other leases it lost say as little.
  hold_judgement_now("this node's own lease was gone");
  if (stored < last_generation_) {
    // As after a data loss: what the store says about membership is older than what this agent
    // knew; announce now, and the leader republishes above every number seen.
    controller_.reset();
    forget_membership();
    check_membership(std::nullopt);
  }
  last_renewed_ = std::chrono::steady_clock::now();
  return true;
}

void MembershipAgent::notified(std::int64_t g) {
  guarded("generation notice", [&] {
    if (!registration_.registered()) return;
    const std::string number = std::to_string(g);
    observe_generation(number);
    check_membership(number);
  });
}

void MembershipAgent::evicted() {
  log()->warn("node {}: lease of incarnation {} was lost (evicted); restarting workers as a new member",
              options_.node.node, lease().incarnation);
  workers_.kill_all();
  leader_.release();
  controller_.reset();
  job_state_.event("evicted", {{"node", options_.node.node}, {"incarnation", lease().incarnation}});
  complete_registration();
}

// The store lost the job's data: the workers keep running; the agent announces its join now and
// the leader (whose own cached view is stale too) republishes the members.
void MembershipAgent::restore_after_data_loss() {
  log()->warn("node {}: the store lost this node's lease and claim (restarted empty or flushed); re-established "
              "incarnation {} and kept its workers",
              options_.node.node, lease().incarnation);
  controller_.reset();
  forget_membership();
  check_membership(std::nullopt);  // announces now
  ensure_config();
}

void MembershipAgent::observe_requests(const std::optional<std::string>& value) {
  if (!value) {
    requests_ = {};
    return;
  }
  auto requests = bad_control_.decode(
      *value, [&] { return decode_control(*value, keys::kControl); },
      [&](const InvalidArgument& e) {
        log()->error("node {}: ignoring the pending requests: {}", options_.node.node, e.what());
      });
  requests_ = requests ? std::move(*requests) : ControlRequests{};
}

bool MembershipAgent::observe_refusal(const std::optional<std::string>& value) {
  if (refused_ || !value) return refused_.has_value();
  auto refusal = bad_refusal_.decode(
      *value, [&] { return decode_refusal(*value, keys::refusal(options_.node.node, lease().incarnation)); },
      [&](const InvalidArgument& e) { log()->error("node {}: ignoring a refusal: {}", options_.node.node, e.what()); });
  if (!refusal) return false;
  refused_ = std::move(*refusal);
  log()->error("node {} (incarnation {}) is refused by the job's leader ({}): {}", options_.node.node, lease().incarnation,
               refused_->by, refused_->why);
  return true;
}

// Remembers the highest generation seen (the lease reports it, so that numbering survives a Redis
// wipe). A value that does not decode, or is out of range, is logged (once per distinct value)
// and ignored, never remembered: it must not stop this agent from renewing or contending for the
// leader lease, and the leader's tick refuses to act on it anyway.
void MembershipAgent::observe_generation(const std::optional<std::string>& number) {
  if (!number) return;
  try {
    last_generation_ = std::max(last_generation_, decode_generation_number(*number, keys::kGeneration));
  } catch (const InvalidArgument& e) {
    if (bad_generation_.bad(*number)) log()->error("node {}: ignoring it: {}", options_.node.node, e.what());
  }
}

// Membership converges from any state: an agent with a live lease and a healthy worker that is
// not in the current generation (dropped while alive: a worker restarting on a one-slot node, a
// lease value overwritten, a leader that lost its announcement or its view of `gen`) announces
// its join again — at once when a generation without it is published after its last
// announcement, else at most once per lease. The leader treats a known identity as one
// candidate, so announcing again is idempotent. Costs one GET of `gen:<g>` per generation seen,
// unless the watch derived the record from the stream's delta (elastic/generation_records.h).
void MembershipAgent::check_membership(const std::optional<std::string>& value) {
  if (refused_) return;  // refused by the leader: never announced again (the caller leaves)
  std::int64_t number = 0;
  if (value) {
    try {
      number = decode_generation_number(*value, keys::kGeneration);
    } catch (const InvalidArgument&) {
      return;  // observe_generation() logged it
    }
  }
  if (number != checked_generation_) {
    bool member = false;
    View view{.generation = number};
    if (number > 0) {
      std::shared_ptr<const HeldRecord> held = records_->get(number);
      if (!held && records_->held_generation() > 0) held = catch_up(*store_, *records_, number);  // learned from `gen`
      if (!held) {  // no delta derived it (the first, a gap, a large change): read it
        const std::string key = keys::generation(number);
        auto record = store_->get(key);
        if (!record) return;  // the leader reports this; look again at the next heartbeat
        Generation read = decode_generation(*record, key);  // garbage: guarded() logs it
        if (read.number != number) {
          throw InvalidArgument("invalid value in Redis key " + quote_value(key) + ": it describes generation " +
                                std::to_string(read.number));
        }
        held = records_->put(std::move(read), std::move(*record));
        if (held->generation.number != number) return;  // a newer one is held already: look again
      }
      const Generation& generation = held->generation;
      const auto& mine = lease();
      member = std::any_of(generation.members.begin(), generation.members.end(),
                           [&](const Member& m) { return same_identity(m, mine); });
      view.world_size = generation.world_size();
      view.nodes = static_cast<int>(generation.members.size());
    }
    checked_generation_ = number;
    member_ = member;
    view.member = member;
    view_ = view;
  }
  const std::vector<int> healthy = workers_.healthy();
  if (member_ || healthy.empty()) return;
  if (!announced_generation_) announced_generation_ = number;  // the generation our registration joined
  const bool newer = *announced_generation_ != number;
  const auto now = std::chrono::steady_clock::now();
  if (!newer && now - announced_at_ < options_.timing.lease) return;
  // The lease first (`SET … XX`: never reviving it), in case someone overwrote its value.
  if (!registration_.heartbeat(healthy, last_generation_, /*rewrite=*/true).alive) return;
  sync_preparing();  // before the join it holds back: no longer a member, workers still preparing
  registration_.announce();
  announced_at_ = now;
  announced_generation_ = number;
  if (newer) {
    log()->warn("node {}: generation {} is without this node (incarnation {}); announcing its join again",
                options_.node.node, number, lease().incarnation);
  } else {
    log()->debug("node {}: not in generation {}; announced its join again", options_.node.node, number);
  }
}

// Takes part in leader election with the leader key just read. Followers try at the heartbeat's
// pace (lease/3), so a dead leader's lease (lease/2) is taken over within 5/6 of a lease.
void MembershipAgent::contend_for_leadership(const std::optional<std::string>& holder) {
  if (leader_.held()) return;
  leader_.try_acquire_or_renew(holder);
}

MembershipAgent::BreakCheck MembershipAgent::generation_broke(std::int64_t g) {
  BreakCheck check;
  if (leader_.held() || !options_.presence || g < last_generation_) return {.leads = leader_.held()};
  guarded("leader check", [&] {
    const auto holder = store_->get(keys::kLeader);
    if (!holder || !is_leader_id(*holder) || *holder == member_id()) return;
    const std::size_t slash = holder->rfind('/');
    const std::string node = holder->substr(0, slash), incarnation = holder->substr(slash + 1);
    const std::string key = keys::lease(node, incarnation);
    const auto value = store_->get(key);
    if (!value) return;  // its lease ran out: the leader key follows within half a lease
    if (options_.presence->gone({decode_node_lease(*value, key)}, lease()).empty()) {
      check.leader_connected = true;
      return;
    }
    if (!leader_.take_over(*holder, "generation " + std::to_string(g) + " broke and the leader's agent has no "
                                    "connection to the store")) {
      return;
    }
    controller_.reset();
  });
  check.leads = leader_.held();
  return check;
}

void MembershipAgent::lead() {
  if (!leading()) return;
  guarded("leader tick", [&] {
    auto head = store_->multi_get({keys::kLeader, keys::kGeneration});
    // Reopened by this very read (the server restarted): hold before this tick judges anything.
    if (connection_reopened()) hold_judgement_now("the store's connection was opened again");
    observe_generation(head[1]);
    // The leader key vanished while we held it (renewed every tick, it cannot have expired unless
    // this agent stalled): the store lost its data, or someone removed it. What the controller
    // cached (the generation, the announcements read, a settle window under way) may be gone
    // too, so a fresh one reads the store from scratch.
    if (!head[0]) controller_.reset();
    if (!leader_.try_acquire_or_renew(head[0])) return;
    if (!controller_) {
      controller_ = std::make_unique<MembershipController>(store_, member_id(), options_.nnodes, options_.settle,
                                                           options_.timing.rejoin_window, options_.timing.heartbeat,
                                                           StoreTroubleRule{options_.timing.judgement_hold,
                                                                            options_.timing.slow_store_call},
                                                           options_.presence);
    }
    // Trouble not yet over (this tick is the first call since it failed): hold from now on; the
    // hold then runs a whole lease from the first call that succeeds (store_call_ended).
    controller_->hold_judgement(store_trouble_ ? std::chrono::steady_clock::now() + options_.timing.judgement_hold
                                               : judge_after_);
    tick_controller();
  });
  if (!leader_.held()) controller_.reset();
}

void MembershipAgent::tick_controller() {
  if (auto published = controller_->tick(last_generation_)) last_generation_ = std::max(last_generation_, *published);
}

void MembershipAgent::leave() {
  try {
    registration_.deregister();
    // A leader that leaves while the job goes on publishes the generation without its node before
    // it gives up the lease: a successor would take the lease only at its next heartbeat, up to a
    // third of a lease later, and publish then. A job with an outcome (completed, stopped)
    // publishes nothing more, and its agents all leave at once.
    if (leader_.held() && controller_ && !store_->get(keys::kOutcome)) {
      controller_->leader_leaves();
      tick_controller();
    }
  } catch (const Error& e) {
    log()->warn("node {}: could not deregister: {}", options_.node.node, e.what());
  }
  try {
    leader_.release();
  } catch (const Error& e) {
    log()->warn("node {}: could not give up the leader lease: {}", options_.node.node, e.what());
  }
  try {
    preparing_.set(false);
    sync_preparing();  // its key, if any, erased (it would expire with the lease's TTL anyway)
  } catch (const Error& e) {
    log()->debug("node {}: could not erase its preparing key: {}", options_.node.node, e.what());
  }
}

}  // namespace hdp::elastic
