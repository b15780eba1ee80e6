#include "elastic/leader_lease.h"

#include "common/log.h"
#include "elastic/job_keys.h"
#include "elastic/job_state.h"

namespace hdp::elastic {

LeaderLease::LeaderLease(std::shared_ptr<Store> job_store, std::string candidate_id, Store::Duration ttl)
    : store_(std::move(job_store)), id_(std::move(candidate_id)), ttl_(ttl) {}

bool LeaderLease::try_acquire_or_renew() { return try_acquire_or_renew(store_->get(keys::kLeader)); }

bool LeaderLease::try_acquire_or_renew(const std::optional<std::string>& holder) {
  const bool was_held = held_;
  if (holder == id_) {
    held_ = store_->commit(Transaction{}.require(keys::kLeader, id_).add(Write::expire(keys::kLeader, ttl_)));
  } else if (!holder) {
    held_ = store_->commit(Transaction{}
                               .require_absent(keys::kLeader)
                               .add(Write::set(keys::kLeader, id_, ttl_))
                               .add(event_write("leader", {{"leader", id_}})));
  } else {
    held_ = false;
  }
  if (held_ != was_held) log()->info("{} {} the leader lease", id_, held_ ? "holds" : "lost");
  return held_;
}

void LeaderLease::release() {
  if (held_) store_->commit(Transaction{}.require(keys::kLeader, id_).add(Write::erase(keys::kLeader)));
  held_ = false;
}

}  // namespace hdp::elastic
