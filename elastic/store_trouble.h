// File: elastic/store_trouble.h
//
// The store's trouble is not a node's fault (docs/architecture.md, "The store's bad days"). A
// lease that ran out while the store was slow, unreachable, restarted or rolled back says nothing
// about its node, so the leader judges no lease (publishes nothing, drops nobody) while judgement
// is held. With a StoreTroubleRule, judgement is held:
//  - until hold_judgement()'s time (the leading agent's own store calls failed or were slow);
//  - for rule.hold after a tick whose reads took longer than rule.slow_read;
//  - while the leader's own lease is missing (it is alive: the store lost or expired the lease),
//    unless the leader erased it itself (leader_leaves(): its agent deregistered);
//  - after more than half of the members (at least two) were found without a lease at once, once
//    per generation: those still gone after the hold are dropped. A member whose node registered
//    again (a live candidate of the same node: its agent was restarted) is replaced, not lost to
//    the store, and does not count;
//  - after the store's generation went back below the newest any agent saw (a rollback: restored
//    from an older snapshot, a failover to a replica that missed the last writes), once per
//    rolled-back number.
// A zero rule.hold turns the rule off (a zero slow_read turns off only the slow-read part).
// Not thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>

#include "elastic/membership.h"
#include "elastic/membership_decision.h"
#include "elastic/store.h"

namespace hdp::elastic {

// See the header comment; zero durations turn the rule off.
struct StoreTroubleRule {
  Store::Duration hold{0};       // how long no lease is judged after trouble (an agent: its lease)
  Store::Duration slow_read{0};  // a tick whose reads took longer saw the store in trouble
};

class StoreTroubleHold {
 public:
  using Clock = std::chrono::steady_clock;

  // `leader_id`: the leading agent's member id, "<node>/<incarnation>".
  StoreTroubleHold(StoreTroubleRule rule, std::string leader_id) : rule_(rule), leader_id_(std::move(leader_id)) {}

  // No lease is judged before `until`.
  void hold_judgement(Clock::time_point until) { judge_after_ = std::max(judge_after_, until); }
  bool judging(Clock::time_point now) const { return now >= judge_after_; }
  // The leading agent deregistered (it leaves the job): its own lease is gone on purpose.
  void leader_leaves() { leader_left_ = true; }

  // The rule applied to one tick whose reads began at `began`: false while judgement is held.
  // `number`: the store's generation; `newest_known`: the newest generation the leader or a lease
  // saw; `current`: the generation the leader holds, with its join candidates; `leases`: the live
  // leases read, by key.
  bool may_judge(Clock::time_point began, std::int64_t number, std::int64_t newest_known, const Generation& current,
                 std::span<const JoinCandidate> candidates, const std::map<std::string, NodeLease>& leases);

 private:
  void hold(Clock::time_point now, const std::string& why);
  // How many members have no lease, not counting those replaced by a live candidate of their node.
  static std::size_t members_without_lease(const Generation& current, std::span<const JoinCandidate> candidates,
                                           const std::map<std::string, NodeLease>& leases);

  StoreTroubleRule rule_;
  std::string leader_id_;
  bool leader_left_ = false;
  Clock::time_point judge_after_{};  // no lease is judged before this
  std::int64_t mass_expiry_held_ = -1;  // the generation whose mass expiry held judgement
  std::int64_t rollback_held_ = -1;     // the rolled-back generation number that held judgement
};

}  // namespace hdp::elastic
