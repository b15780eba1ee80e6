#include "elastic/lease_timing.h"

#include <algorithm>
#include <string>

#include "common/error.h"

namespace hdp::elastic {

LeaseTiming derive_lease_timing(std::chrono::milliseconds lease, std::optional<std::chrono::milliseconds> redis_timeout) {
  using std::chrono::milliseconds;
  const auto ms = [](milliseconds d) { return std::to_string(d.count()); };
  if (lease < kMinLease || lease > kMaxLease) {
    throw InvalidArgument("--lease-ms " + ms(lease) + " is out of range [" + ms(kMinLease) + ", " + ms(kMaxLease) + "]");
  }
  LeaseTiming timing;
  timing.lease = lease;
  timing.heartbeat = lease / 3;
  timing.leader_lease = lease / 2;
  timing.leader_tick = std::min(milliseconds(200), lease / 10);
  timing.registration_wait = lease * 2;
  timing.rejoin_window = timing.heartbeat + timing.leader_tick;
  timing.slow_store_call = timing.heartbeat;
  timing.judgement_hold = lease;

  const milliseconds budget = redis_timeout.value_or(timing.heartbeat / 2);
  if (budget < milliseconds(1)) throw InvalidArgument("--redis-timeout " + ms(budget) + " must be at least 1 ms");
  if (2 * budget > timing.heartbeat) {
    throw InvalidArgument("--redis-timeout " + ms(budget) + " does not fit in a heartbeat interval of --lease-ms " +
                          ms(lease) + " (lease/3 = " + ms(timing.heartbeat) + " ms): a store call may block the agent for " +
                          "2 x --redis-timeout = " + ms(2 * budget) + " ms; give --redis-timeout at most " +
                          ms(timing.heartbeat / 2) + " or --lease-ms at least " + ms(std::max(6 * budget, kMinLease)) +
                          " (or leave --redis-timeout out: it is then derived from the lease)");
  }
  timing.store.connect_timeout = std::min(budget, timing.store.connect_timeout);
  timing.store.command_timeout = budget;
  timing.store.retry_timeout = budget;
  timing.store_call_limit = 2 * budget;
  return timing;
}

}  // namespace hdp::elastic
