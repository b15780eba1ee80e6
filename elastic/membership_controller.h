// File: elastic/membership_controller.h
//
// The leader's view of membership. Each tick() reads, in a constant number of round trips (no
// KEYS or SCAN): the current generation, the join counter, new join announcements, the
// `evictions` and `cordons` records, the current generation's straggler requests
// (gen:<g>:stragglers) and broken flag, `last_leave`, and the leases of members, candidates and
// benched nodes (lease_cache.h: in one MGET, and their TTLs, at most once per full_read_every or
// when `last_leave` changed, since an agent that deregisters erases its lease before its TTL runs
// out; between those only leases whose TTL ran out). Then:
//  - the new evictions (eviction_policy.h: straggler requests, and the hung ranks of a generation
//    broken on a timeout, from its abandon reports);
//  - the store's trouble (store_trouble.h): while judgement is held, nothing more is done;
//  - with an AgentPresence, a broken generation's members whose agent process is gone (its store
//    connection closed, its lease not yet run out) are dropped at once (agent_presence.h);
//  - the membership decision (membership_decision.h, a pure function of what was read): who
//    leaves, who joins, who stands by, which evictions take effect, and whether to publish now,
//    wait for the settle window, or only repair the state;
//  - a candidate of another build than the members' is refused (release.h): its refusal key and a
//    `node_refused` event, written once by this leader in the tick's commit;
//  - the writes: generation g+1 is published in one commit() that checks `gen == g`, that we still
//    hold the leader lease and that the job has no `outcome` yet, with the evictions' events and
//    record; with the same members, the state hash's fields of the current generation that are
//    missing (deleted or edited by hand) and the standby list are written again, fenced the same way.
// Numbers read from the store are range-checked (membership.h): garbage in `gen`, `joins` or the
// current `gen:<g>` makes tick() throw InvalidArgument naming the key, having written nothing; a
// lease that does not decode counts as a dead node; a `cordons` or `evictions` value that does not
// decode is ignored (logged once per distinct value). It never publishes above kMaxGeneration.
// When the store lost its data (restarted empty, flushed, or `gen` deleted), the members come back
// as candidates whose leases remember the job's generations (last_generation): with no generation
// in the store, joins wait max(settle, rejoin_window) from the first one seen, so that every live
// agent is in the first generation published and it is numbered above all they saw (a job's first
// generation waits the same: the leader cannot tell the two apart). The join counter, which then
// starts again from 0, is read from its new start. After a rollback (store_trouble.h) the next
// generation is published once the hold ends even with the same members, numbered above every
// number seen, with a `store_rollback` event; the workers move to it from memory.
// Not thread-safe; tick() blocks on the store.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/warn_once.h"
#include "elastic/agent_presence.h"
#include "elastic/control.h"
#include "elastic/eviction_policy.h"
#include "elastic/lease_cache.h"
#include "elastic/membership.h"
#include "elastic/membership_decision.h"
#include "elastic/store.h"
#include "elastic/store_trouble.h"

namespace hdp::elastic {

class MembershipController {
 public:
  static constexpr std::chrono::seconds kJoinHoleWait{10};
  // Join announcements read per tick at most; more are read on the following ticks.
  static constexpr std::int64_t kJoinsPerTick = 1024;
  static constexpr std::chrono::seconds kHungReportWait = EvictionPolicy::kHungReportWait;

  // `full_read_every`: how often every lease is read in full (zero: every tick; an agent passes its
  // heartbeat period); see lease_cache.h. `trouble`: store_trouble.h.
  MembershipController(std::shared_ptr<Store> job_store, std::string leader_id, JobConfig config,
                       Store::Duration settle, Store::Duration rejoin_window = Store::Duration::zero(),
                       Store::Duration full_read_every = Store::Duration::zero(), StoreTroubleRule trouble = {},
                       std::shared_ptr<const AgentPresence> presence = nullptr);

  // Returns the number of the generation it published, if any. `seen_by_leader`: the newest
  // generation the leading agent has seen; the next one is numbered above it too.
  std::optional<std::int64_t> tick(std::int64_t seen_by_leader = 0);
  // No lease is judged before `until` (the leading agent's store calls failed or were slow).
  void hold_judgement(std::chrono::steady_clock::time_point until) { trouble_.hold_judgement(until); }
  bool judging(std::chrono::steady_clock::time_point now) const { return trouble_.judging(now); }
  // The leading agent deregistered: the next tick drops its node like any whose lease is gone.
  void leader_leaves() { trouble_.leader_leaves(); }

 private:
  using Clock = std::chrono::steady_clock;
  using Candidate = JoinCandidate;
  // What a tick reads first, in one MGET.
  struct Head {
    std::int64_t number = 0;          // the store's `gen` (0: none)
    bool cached_is_current = false;   // it is the generation held, and one was published
    std::optional<std::string> broken;    // the current generation's broken reason
    std::optional<std::string> requests;  // the current generation's straggler requests
    bool someone_left = false;            // `last_leave` changed: an agent deregistered
    Evictions evictions;
    Cordons cordons;
  };

  // Reads the head, the generation it names and the new join announcements.
  Head read_head();
  void load_generation(std::int64_t number);
  void read_new_joins(std::int64_t join_count);
  Cordons read_cordons(const std::optional<std::string>& value);
  // The leases of the members, candidates and benched nodes (membership_decision.h), by key.
  std::map<std::string, NodeLease> read_leases(const Evictions& evictions, bool force);
  // A broken generation's members whose agent is gone (agent_presence.h) lose their lease in
  // `view` (the decision then drops them, as after the lease ran out); returns the writes that
  // erase those leases and record an `agent_gone` event each.
  std::vector<Write> drop_gone_agents(MembershipView& view);
  // Appends to `writes` the refusal (key and event) of each refused candidate whose refusal this
  // leader has not committed; returns those candidates.
  std::vector<MembershipDecision::Refused> refusal_writes(const std::vector<MembershipDecision::Refused>& refused,
                                                          std::int64_t now_ms, std::vector<Write>& writes);
  // Logs once each candidate that waits for its workers' preparation, so that a joiner whose setup
  // never ends is seen.
  void note_preparing(const std::vector<Candidate>& preparing);
  // Carries out `decision` with `extra` written in the same commit; `committed`: a commit with
  // `extra` applied.
  std::optional<std::int64_t> act(MembershipDecision decision, std::vector<Write> extra, bool& committed);
  std::optional<std::int64_t> publish(std::vector<Member> members, std::int64_t newest_seen_generation,
                                      const std::vector<Candidate>& standby, const std::vector<Candidate>& preparing,
                                      std::vector<Write> extra);
  // With the same members: `extra`, the standby list and its preparing nodes when they changed,
  // and the state's missing fields, fenced like a publication.
  // True when it committed.
  bool repair_state(const std::vector<Candidate>& standby, const std::vector<Candidate>& preparing,
                    std::vector<Write> extra);
  // The state hash's fields that the current generation's publication wrote and that are missing
  // now (the hash deleted or edited by hand: `hdp status` and the dashboard would lose the status
  // and generation until the next publication), with the values to put back. Reads the hash at
  // most every full_read_every (a heartbeat for an agent); empty in between.
  Fields missing_state_fields(const std::string& standby, const std::string& preparing);

  std::shared_ptr<Store> store_;
  std::string leader_id_;
  JobConfig config_;
  Store::Duration settle_;
  Store::Duration rejoin_window_;
  Store::Duration full_read_every_;
  Generation current_;                        // number 0 = none published yet
  std::int64_t joins_read_ = -1;              // announcements read up to here; -1 until the first tick
  std::optional<std::string> last_leave_;     // `last_leave` as the last tick read it
  // An agent takes its join number (add) before it writes the announcement: a number whose
  // announcement is missing is looked for again each tick, up to kJoinHoleWait after it was first
  // found missing, before it is skipped as dead; later numbers are read meanwhile.
  std::map<std::int64_t, Clock::time_point> holes_;
  std::vector<Candidate> candidates_;         // announced, not yet members, not known dead
  std::optional<Clock::time_point> pending_since_;  // when a join-only change was first seen
  std::optional<Clock::time_point> exhausted_logged_;  // last "generation numbers exhausted" error
  // The state's `standby` and `preparing` as this leader last wrote them; none yet: a leader that
  // takes over writes them once, whatever its predecessor left there.
  std::optional<std::string> standby_written_, preparing_written_;
  std::set<std::string> refusals_written_;    // candidates (member ids) whose refusal (release.h) this leader committed
  std::set<std::string> preparing_logged_;    // candidates ("node/incarnation") logged as preparing, still so
  Clock::time_point next_state_check_{};      // missing_state_fields() reads the hash again from then
  WarnOnce bad_cordons_;                      // the last undecodable `cordons` value
  EvictionPolicy evictions_;
  LeaseCache leases_;
  StoreTroubleHold trouble_;
  std::shared_ptr<const AgentPresence> presence_;  // null: members are dropped by their leases only
};

}  // namespace hdp::elastic
