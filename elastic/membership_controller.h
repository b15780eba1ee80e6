// File: elastic/membership_controller.h
//
// The leader's view of membership. Each tick() reads, in a constant number of round trips (no
// KEYS or SCAN): the current generation, the join counter, new join announcements, and the
// leases of members and candidates (in one MGET, and their TTLs, at most once per
// full_read_every; between those only leases whose TTL ran out: read_leases()). When the set of live (node, incarnation, healthy
// slots) differs from the current generation it publishes generation g+1 in one commit() that
// checks `gen == g`, that we still hold the leader lease and that the job has no `outcome` yet:
//  - a member whose lease expired or whose slots failed leaves at once;
//  - joins wait for a settle window, so that several joins become one change;
//  - survivors keep their relative order, newcomers follow in join order, up to max_nodes
//    (the rest stand by); below min_nodes the generation's status is `waiting`.
// Numbers read from the store are range-checked (membership.h): garbage in `gen`, `joins` or the
// current `gen:<g>` makes tick() throw InvalidArgument naming the key, having written nothing; a
// lease that does not decode counts as a dead node. It never publishes above kMaxGeneration.
// When the store lost its data (restarted empty, flushed, or `gen` deleted), the members come back
// as candidates whose leases remember the job's generations (last_generation): with no generation
// in the store, joins wait max(settle, rejoin_window) from the first one seen, so that every live
// agent is in the first generation published and it is numbered above all they saw (a job's first
// generation waits the same: the leader cannot tell the two apart). The join counter, which then
// starts again from 0, is read from its new start.
// Evictions (membership.h): the controller alone writes `evictions`. Each tick it reads the current
// generation's straggler requests (gen:<g>:stragglers) with the keys above, and when the
// generation is broken, its abandon reports (gen:<g>:abandoned): if a collective timed out, the
// members that never reported are hung (it waits for the live ones' reports: until all but one
// member reported, or the longest collective timeout reported, at most kHungReportWait). An
// evicted node/slot is left out of every generation published until its cool-down ends, then
// admitted again like a join (after the settle window), an `evict`, `evict_refused` or `readmit`
// event written in the publishing commit. An eviction that would leave fewer than min_nodes
// nodes is refused, and a cool-down that would is cut short: the job keeps its slow rank
// (the trainer plans around its speed) rather than stop. Every straggler request is answered by
// a new generation at once, refused or not: the ranks wait for it at a step boundary.
// The store's trouble is not a node's fault (docs/architecture.md, "The store's bad days"): with
// a StoreTroubleRule, no lease is judged (nothing is published, nobody dropped) while judgement is
// held: until hold_judgement()'s time (the leading agent's own calls failed or were slow), for
// rule.hold after a tick whose reads took longer than rule.slow_read, while the leader's own lease
// is missing (it is alive: the store lost or expired the lease), after more than half of the
// members (at least two) were found without a lease at once (once per generation: if they are
// still gone after the hold, they are dropped), and after the store's generation went back below
// the newest any agent saw (a rollback: restored from an older snapshot, a failover to a replica
// that missed the last writes). After a rollback the next generation is published once the hold
// ends even with the same members, numbered above every number seen, with a `store_rollback`
// event; the workers move to it from memory.
// Not thread-safe; tick() blocks on the store.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "elastic/control.h"
#include "elastic/membership.h"
#include "elastic/store.h"

namespace hdp::elastic {

// See the header comment; zero durations turn the rule off.
struct StoreTroubleRule {
  Store::Duration hold{0};       // how long no lease is judged after trouble (an agent: its lease)
  Store::Duration slow_read{0};  // a tick whose reads took longer saw the store in trouble
};

class MembershipController {
 public:
  static constexpr std::chrono::seconds kJoinHoleWait{10};
  // Join announcements read per tick at most; more are read on the following ticks.
  static constexpr std::int64_t kJoinsPerTick = 1024;
  static constexpr std::chrono::seconds kHungReportWait{30};

  // `full_read_every`: how often every lease is read in full (zero: every tick; an agent passes its
  // heartbeat period); see read_leases().
  MembershipController(std::shared_ptr<Store> job_store, std::string leader_id, JobConfig config,
                       Store::Duration settle, Store::Duration rejoin_window = Store::Duration::zero(),
                       Store::Duration full_read_every = Store::Duration::zero(), StoreTroubleRule trouble = {});

  // Returns the number of the generation it published, if any. `seen_by_leader`: the newest
  // generation the leading agent has seen; the next one is numbered above it too.
  std::optional<std::int64_t> tick(std::int64_t seen_by_leader = 0);
  // No lease is judged before `until` (the leading agent's store calls failed or were slow).
  void hold_judgement(std::chrono::steady_clock::time_point until) { judge_after_ = std::max(judge_after_, until); }
  bool judging(std::chrono::steady_clock::time_point now) const { return now >= judge_after_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Candidate {
    std::int64_t sequence = 0;
    std::string node;
    std::string incarnation;
  };

  void load_generation(std::int64_t number);
  void read_new_joins(std::int64_t join_count);
  std::optional<std::int64_t> publish(std::vector<Member> members, std::int64_t newest_seen_generation,
                                      const std::vector<Candidate>& standby, std::vector<Write> extra);
  // New evictions this tick asks for: the current generation's straggler requests (once per
  // generation) and, when it broke on a timeout, its hung members. nullopt: wait for more reports.
  std::optional<std::vector<Eviction>> new_evictions(bool broken, const std::optional<std::string>& requests,
                                                     const Evictions& evictions);
  Evictions read_evictions(const std::optional<std::string>& value);
  // The store-trouble rule (header comment): false while judgement is held. `newest_known`: the
  // newest generation the leader or a lease saw.
  bool hold_for_store_trouble(Clock::time_point began, std::int64_t number, std::int64_t newest_known,
                              const std::map<std::string, NodeLease>& leases);
  Cordons read_cordons(const std::optional<std::string>& value);
  // The state hash's fields that the current generation's publication wrote and that are missing
  // now (the hash deleted or edited by hand: `hdp status` and the dashboard would lose the status
  // and generation until the next publication), with the values to put back. Reads the hash at
  // most every full_read_every (a heartbeat for an agent); empty in between.
  Fields missing_state_fields(const std::string& standby);
  // The leases under `keys` that are live and well-formed, by key. Reading every lease value each
  // tick costs the store one lookup and a value per node five times a second (at 12,500 nodes,
  // about 5% of a Redis core); a live lease's value changes only when its agent rewrites it at a
  // heartbeat, and what must be seen within a tick is a lease that expired. So with
  // full_read_every > 0, the values and remaining TTLs of all of them are read when `force`, when
  // the keys differ from the last full read's, or full_read_every after it; in between, a tick reads
  // only the leases whose TTL, as last read, has run out (a live agent's never has: it refreshes
  // every heartbeat, a third of the lease), so that an expired lease is still seen within a tick
  // of its expiry, and a rewritten value within full_read_every.
  std::map<std::string, NodeLease> read_leases(const std::vector<std::string>& keys, bool force);

  std::shared_ptr<Store> store_;
  std::string leader_id_;
  JobConfig config_;
  Store::Duration settle_;
  Store::Duration rejoin_window_;
  Generation current_;                        // number 0 = none published yet
  std::int64_t joins_read_ = -1;              // announcements read up to here; -1 until the first tick
  // An agent takes its join number (add) before it writes the announcement: a number whose
  // announcement is missing is looked for again each tick, up to kJoinHoleWait after it was first
  // found missing, before it is skipped as dead; later numbers are read meanwhile.
  std::map<std::int64_t, Clock::time_point> holes_;
  std::vector<Candidate> candidates_;         // announced, not yet members, not known dead
  std::optional<Clock::time_point> pending_since_;  // when a join-only change was first seen
  std::optional<Clock::time_point> exhausted_logged_;  // last "generation numbers exhausted" error
  std::int64_t requests_handled_ = 0;          // the generation whose straggler requests were applied
  std::optional<std::pair<std::int64_t, Clock::time_point>> broken_seen_;  // generation, first seen broken
  std::string standby_written_;               // the state's `standby` as this leader last wrote it
  Clock::time_point next_state_check_{};      // missing_state_fields() reads the hash again from then
  std::optional<std::string> bad_cordons_;     // the last undecodable `cordons` value, logged once
  std::optional<std::string> bad_evictions_;   // the last undecodable `evictions` value, logged once
  std::map<std::string, std::int64_t> steps_;  // this tick's new evictions: the step a request named (-1: none)
  Store::Duration full_read_every_;
  StoreTroubleRule trouble_;
  Clock::time_point judge_after_{};              // no lease is judged before this
  std::int64_t mass_expiry_held_ = -1;           // the generation whose mass expiry held judgement
  std::int64_t rollback_held_ = -1;              // the rolled-back generation number that held judgement
  struct CachedLease {
    NodeLease lease;
    Clock::time_point check_at;  // when its TTL, as last read, runs out
  };
  std::map<std::string, CachedLease> lease_cache_;  // live, well-formed leases as last read
  std::vector<std::string> fully_read_keys_;         // the keys of the last full read
  Clock::time_point next_full_read_{};
};

}  // namespace hdp::elastic
