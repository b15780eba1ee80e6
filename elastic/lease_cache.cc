// File: elastic/lease_cache.cc
//
// LeaseCache (lease_cache.h): full reads of every lease and, in between, partial reads of the
// leases whose TTL ran out.
#include "elastic/lease_cache.h"

#include <optional>

#include "common/error.h"
#include "common/log.h"

namespace hdp::elastic {

std::map<std::string, NodeLease> LeaseCache::read(Store& store, const std::vector<std::string>& keys, bool force) {
  const auto now = Clock::now();
  const bool full = force || full_read_every_.count() == 0 || keys != fully_read_keys_ || now >= next_full_read_;
  std::vector<std::string> to_read;
  if (full) {
    to_read = keys;
  } else {
    for (const auto& key : keys) {
      auto it = cache_.find(key);
      if (it == cache_.end() || it->second.check_at <= now) to_read.push_back(key);
    }
  }
  if (full) cache_.clear();
  if (!to_read.empty()) {
    auto raw = store.multi_get(to_read);
    // Read after the values: a TTL measured from `now` (before both) can only run out early, and
    // a lease looked at early is merely read again.
    std::vector<std::optional<Store::Duration>> ttls;
    if (full_read_every_.count() > 0) ttls = store.remaining_ttl(to_read);
    for (std::size_t i = 0; i < to_read.size(); ++i) {
      cache_.erase(to_read[i]);
      if (!raw[i]) continue;
      try {
        // A lease with no TTL (or one that vanished between the two reads) is read again next tick.
        const auto check_at = i < ttls.size() && ttls[i] ? now + *ttls[i] : now;
        cache_.emplace(to_read[i], CachedLease{decode_node_lease(*raw[i], to_read[i]), check_at});
      } catch (const InvalidArgument& e) {
        log()->warn("treating node as gone: {}", e.what());
      }
    }
  }
  if (full) {
    fully_read_keys_ = keys;
    next_full_read_ = now + full_read_every_;
  }
  std::map<std::string, NodeLease> leases;
  for (const auto& key : keys) {
    if (auto it = cache_.find(key); it != cache_.end()) leases.emplace(key, it->second.lease);
  }
  return leases;
}

}  // namespace hdp::elastic
