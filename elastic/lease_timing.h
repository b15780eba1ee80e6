// File: elastic/lease_timing.h
//
// Every timing value of an agent, derived from its node lease in this one place and checked
// once (docs/architecture.md, "Timing"):
//   heartbeat     = lease / 3        the lease is refreshed this often: it outlives one heartbeat
//                                    that failed after its whole budget (a call gives up within a
//                                    period; the next attempt still lands a third of a lease before
//                                    expiry; docs/architecture.md, "Timing")
//   leader lease  = lease / 2        followers contend each heartbeat: a dead leader is replaced
//                                    within 5/6 of a lease
//   leader tick   = min(200 ms, lease / 10)
//   registration  = 2 × lease        how long a new incarnation waits for a previous one's lease
//   rejoin window = heartbeat + tick  after the store lost the job's data, every live agent notices
//                                    at its next heartbeat and announces at once; with no
//                                    generation in the store the leader waits this long (or the
//                                    settle window, if longer) from the first announcement, so
//                                    that all of them return in one generation
//   store         = the agent's Redis timeouts. The agent makes blocking store calls on its one
//                   Asio thread (signals and child exits wait meanwhile), so one call must give up
//                   within a heartbeat interval: connect, command and retry budget are each
//                   --redis-timeout, by default heartbeat / 2, and a call returns within
//                   2 × --redis-timeout (a reconnect's log-in may overrun the budget by one
//                   connect timeout), so 2 × --redis-timeout must be at most the heartbeat.
//                   A tick whose call gave up is logged and retried at the next tick.
//   slow store call = heartbeat      a heartbeat or leader tick that took longer than this (or failed
//                                    on the store) means the store was in trouble: every lease may
//                                    have run out for the store's sake, not the nodes'
//   judgement hold = lease           after such trouble, the leader judges no lease until a whole
//                                    lease has passed since the store answered again: every live
//                                    agent has renewed or taken back its lease by then (it
//                                    heartbeats three times a lease; docs/architecture.md, "The
//                                    store's bad days")
//
// Example:
//   LeaseTiming timing = derive_lease_timing(kDefaultLease, std::nullopt);  // 5000 ms
//   // timing.heartbeat == 1666 ms, timing.store.retry_timeout == 833 ms
#pragma once

#include <chrono>
#include <optional>

#include "elastic/redis_store.h"

namespace hdp::elastic {

struct LeaseTiming {
  using Duration = std::chrono::milliseconds;
  Duration lease{};
  Duration heartbeat{};
  Duration leader_lease{};
  Duration leader_tick{};
  Duration registration_wait{};
  Duration rejoin_window{};
  Duration slow_store_call{};
  Duration judgement_hold{};
  RedisStoreOptions store{};    // the agent's Redis connection
  Duration store_call_limit{};  // the longest one store call can block: 2 × store.retry_timeout
};

// The node lease: its default (--lease-ms of `hdp agent` and `hdp run`, AgentOptions) and its range,
// written here only.
inline constexpr std::chrono::milliseconds kDefaultLease{5000};
inline constexpr std::chrono::milliseconds kMinLease{300};
inline constexpr std::chrono::milliseconds kMaxLease{600000};

// Derives and checks. `redis_timeout` is --redis-timeout when given (else derived from the
// heartbeat). Throws InvalidArgument naming the flags and values for a lease outside
// [kMinLease, kMaxLease] or a --redis-timeout that does not fit in a heartbeat interval.
LeaseTiming derive_lease_timing(std::chrono::milliseconds lease, std::optional<std::chrono::milliseconds> redis_timeout);

}  // namespace hdp::elastic
