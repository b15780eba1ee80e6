// File: elastic/lease_cache.h
//
// The leader's reads of node leases (lease:<node>/<incarnation>): which of the leases it asks
// about are live and well-formed, at a cost that does not grow with the number of quiet ticks.
//
// Reading every lease value each tick costs the store one lookup and a value per node five times
// a second (at 12,500 nodes, about 5% of a Redis core). A live lease's value changes only when its
// agent rewrites it at a heartbeat, and what must be seen within a tick is a lease that expired.
// So with full_read_every > 0, the values and remaining TTLs of all of them are read when `force`,
// when the keys differ from the last full read's, or full_read_every after it; in between, a read
// looks up only the leases whose TTL, as last read, has run out (a live agent's never has: it
// refreshes every heartbeat, a third of the lease). An expired lease is thus still seen within a
// tick of its expiry, and a rewritten value within full_read_every. With full_read_every zero,
// every read is a full one (and no TTL is read).
// A lease that does not decode counts as a dead node (logged). Not thread-safe.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "elastic/membership.h"
#include "elastic/store.h"

namespace hdp::elastic {

class LeaseCache {
 public:
  explicit LeaseCache(Store::Duration full_read_every) : full_read_every_(full_read_every) {}

  // The leases under `keys` that are live and well-formed, by key (see the header comment).
  std::map<std::string, NodeLease> read(Store& store, const std::vector<std::string>& keys, bool force);

 private:
  using Clock = std::chrono::steady_clock;
  struct CachedLease {
    NodeLease lease;
    Clock::time_point check_at;  // when its TTL, as last read, runs out
  };

  Store::Duration full_read_every_;
  std::map<std::string, CachedLease> cache_;  // live, well-formed leases as last read
  std::vector<std::string> fully_read_keys_;  // the keys of the last full read
  Clock::time_point next_full_read_{};
};

}  // namespace hdp::elastic
