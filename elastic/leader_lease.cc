#include "elastic/leader_lease.h"

#include <algorithm>

#include "common/log.h"
#include "common/text.h"
#include "elastic/job_keys.h"
#include "elastic/job_state.h"

namespace hdp::elastic {

bool is_leader_id(std::string_view value) {
  const auto slash = value.rfind('/');
  if (slash == std::string_view::npos || slash == 0) return false;
  const std::string_view incarnation = value.substr(slash + 1);
  return incarnation.size() == 16 && std::all_of(incarnation.begin(), incarnation.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

LeaderLease::LeaderLease(std::shared_ptr<Store> job_store, std::string candidate_id, Store::Duration ttl)
    : store_(std::move(job_store)), id_(std::move(candidate_id)), ttl_(ttl) {}

bool LeaderLease::try_acquire_or_renew() {
  std::optional<std::string> holder;
  try {
    holder = store_->get(keys::kLeader);
  } catch (const WrongType& e) {
    if (e.key() != keys::kLeader) throw;
    const bool was_held = held_;
    held_ = replace_garbage(std::nullopt, e.what());
    if (held_ != was_held) log()->info("{} {} the leader lease", id_, held_ ? "holds" : "lost");
    return held_;
  }
  return try_acquire_or_renew(holder);
}

bool LeaderLease::acquire() {
  return commit_with_job_state(*store_, Transaction{}
                            .require_absent(keys::kLeader)
                            .add(Write::set(keys::kLeader, id_, ttl_))
                            .add(event_write("leader", {{"leader", id_}})));
}

bool LeaderLease::take_over(const std::string& holder, const std::string& why) {
  if (holder == id_) return held_;
  held_ = commit_with_job_state(*store_, Transaction{}
                                             .require(keys::kLeader, holder)
                                             .add(Write::set(keys::kLeader, id_, ttl_))
                                             .add(event_write("leader", {{"leader", id_}, {"from", holder}})));
  if (held_) log()->info("{} holds the leader lease, taken from {}: {}", id_, holder, why);
  return held_;
}

bool LeaderLease::try_acquire_or_renew(const std::optional<std::string>& holder) {
  const bool was_held = held_;
  try {
    if (holder == id_) {
      garbage_.reset();
      held_ = store_->commit(Transaction{}.require(keys::kLeader, id_).add(Write::expire(keys::kLeader, ttl_)));
    } else if (!holder) {
      held_ = acquire();  // throws WrongType, handled below, when `leader` is not a string
      garbage_.reset();
    } else if (is_leader_id(*holder)) {
      garbage_.reset();
      held_ = false;
    } else {
      held_ = replace_garbage(holder, "it is not <node>/<incarnation>");
    }
  } catch (const WrongType& e) {
    // A multi_get reads a key of another type as missing; the commit that requires it absent says.
    if (e.key() != keys::kLeader) throw;
    held_ = replace_garbage(std::nullopt, e.what());
  }
  if (held_ != was_held) {
    if (held_) {
      log()->info("{} holds the leader lease", id_);
    } else {
      log()->info("{} lost the leader lease (held by {})", id_, holder ? quote_value(*holder) : std::string("nobody"));
    }
  }
  return held_;
}

bool LeaderLease::replace_garbage(const std::optional<std::string>& value, const std::string& why) {
  const auto now = std::chrono::steady_clock::now();
  const std::string shown = value ? quote_value(*value) : std::string("a value of another type");
  if (!garbage_ || *garbage_ != value) {
    garbage_ = value;
    garbage_since_ = now;
    log()->warn("{}: Redis key 'leader' holds {} ({}), which no agent writes; treating it as no leader, and replacing "
                "it if it is still there in {} ms",
                id_, shown, why, ttl_.count());
    return false;
  }
  if (now - garbage_since_ <= ttl_) return false;
  bool acquired = false;
  if (value) {
    acquired = commit_with_job_state(*store_, Transaction{}
                                  .require(keys::kLeader, *value)
                                  .add(Write::set(keys::kLeader, id_, ttl_))
                                  .add(event_write("leader", {{"leader", id_}})));
  } else {
    store_->erase(keys::kLeader);
    acquired = acquire();
  }
  log()->warn("{}: Redis key 'leader' held {} for more than {} ms; {}", id_, shown, ttl_.count(),
              acquired ? "replaced it with this agent's id" : "another agent replaced it first");
  garbage_.reset();
  return acquired;
}

void LeaderLease::release() {
  if (held_) store_->commit(Transaction{}.require(keys::kLeader, id_).add(Write::erase(keys::kLeader)));
  held_ = false;
}

}  // namespace hdp::elastic
