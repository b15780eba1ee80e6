// File: elastic/store_trouble.cc
//
// StoreTroubleHold (store_trouble.h): when the leader holds its judgement of leases.
#include "elastic/store_trouble.h"

#include <algorithm>

#include "common/log.h"
#include "elastic/job_keys.h"

namespace hdp::elastic {

void StoreTroubleHold::hold(Clock::time_point now, const std::string& why) {
  if (now >= judge_after_) log()->warn("{}: judging no lease for {} ms", why, rule_.hold.count());
  judge_after_ = std::max(judge_after_, now + rule_.hold);
}

std::size_t StoreTroubleHold::members_without_lease(const Generation& current,
                                                    std::span<const JoinCandidate> candidates,
                                                    const std::map<std::string, NodeLease>& leases) {
  std::size_t missing = 0;
  for (const auto& member : current.members) {
    const bool replaced = std::any_of(candidates.begin(), candidates.end(), [&](const JoinCandidate& c) {
      return c.node == member.node && leases.contains(keys::lease(c.node, c.incarnation));
    });
    missing += !replaced && !leases.contains(keys::lease(member.node, member.incarnation));
  }
  return missing;
}

bool StoreTroubleHold::may_judge(Clock::time_point began, std::int64_t number, std::int64_t newest_known,
                                 const Generation& current, std::span<const JoinCandidate> candidates,
                                 const std::map<std::string, NodeLease>& leases) {
  if (rule_.hold.count() <= 0) return true;
  const auto now = Clock::now();
  if (rule_.slow_read.count() > 0 && now - began > rule_.slow_read) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - began).count();
    hold(now, "the store took " + std::to_string(ms) + " ms to answer this tick's reads");
  }
  if (number > 0 && number < newest_known && rollback_held_ != number) {
    rollback_held_ = number;
    hold(now, "the store's generation went back from " + std::to_string(newest_known) + " to " +
                  std::to_string(number) +
                  " (it rolled back: restored from an older snapshot, or a failover to a replica that missed the last "
                  "writes)");
  }
  // The leader is alive by definition: its own lease gone means the store lost or expired it.
  for (const auto& member : current.members) {
    if (!leader_left_ && member.node + "/" + member.incarnation == leader_id_ &&
        !leases.contains(keys::lease(member.node, member.incarnation))) {
      hold(now, "this leader's own lease (" + leader_id_ + ") is gone");
    }
  }
  if (now >= judge_after_ && mass_expiry_held_ != current.number) {
    const std::size_t missing = members_without_lease(current, candidates, leases);
    if (missing >= 2 && 2 * missing > current.members.size()) {
      mass_expiry_held_ = current.number;
      hold(now, std::to_string(missing) + " of the " + std::to_string(current.members.size()) +
                    " members' leases ran out at once: taken as the store's trouble, not the nodes' (those still gone "
                    "after the hold are dropped)");
    }
  }
  return now >= judge_after_;
}

}  // namespace hdp::elastic
