// File: elastic/leader_lease.h
//
// Exactly one leader per job: the holder of the `leader` key (SET if absent, with a TTL, renewed
// only while it still holds our id — both are Store::commit()s). If the leader dies its key
// expires and the next candidate to try takes over. Not thread-safe; calls may block on the store.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "elastic/store.h"

namespace hdp::elastic {

class LeaderLease {
 public:
  LeaderLease(std::shared_ptr<Store> job_store, std::string candidate_id, Store::Duration ttl);

  // Acquires the lease when free, renews it when ours. Returns whether we hold it now.
  bool try_acquire_or_renew();
  // The same, given the holder the caller has just read (so followers cost one read per poll,
  // which the caller can batch with others in a multi_get).
  bool try_acquire_or_renew(const std::optional<std::string>& holder);
  // Gives the lease up (if ours) so that another agent takes over at once.
  void release();
  bool held() const { return held_; }

 private:
  std::shared_ptr<Store> store_;
  std::string id_;
  Store::Duration ttl_;
  bool held_ = false;
};

}  // namespace hdp::elastic
