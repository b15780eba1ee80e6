// File: elastic/sentinel.h
//
// Finding the primary of a Redis Sentinel deployment (a redis+sentinel:// endpoint,
// elastic/redis_url.h), as a Sentinel-aware client must (hiredis has no Sentinel support):
//   1. ask the sentinels in turn, each with a short connect timeout (min(connect_timeout, 500 ms)),
//      logging in with the endpoint's sentinel_password when it has one;
//   2. `SENTINEL get-master-addr-by-name NAME` gives the primary's address (nil: that sentinel does
//      not know the name; the next one is asked);
//   3. connect to that address with the data nodes' credentials and db, and check that `ROLE`
//      says "master" (a sentinel that has not yet seen a failover names the old, demoted primary);
//   4. ask every sentinel again (`get-master-addr-by-name` and `SENTINEL master`'s config-epoch,
//      one round trip each): refused when one whose configuration is at least as new as any that
//      names this node names another (a primary paused through a failover answers ROLE master
//      once resumed, until the sentinels demote it, and a sentinel that missed the failover still
//      names it; each failover raises the epoch). Refused too when no sentinel answered because
//      the deadline passed (a connection that waited on a paused node leaves no time); with every
//      sentinel asked and none answering, the ROLE check stands.
// A sentinel that answered moves to the front of the list (it is asked first next time); one that
// named a node that is not a master moves to the back.
//
// Errors (one line; never a password):
//  - InvalidArgument: every sentinel that answered said it knows no master of that name (a
//    mistyped name; not retried);
//  - AuthError: the data node refused the credentials, or no sentinel answered and one refused the
//    sentinel password (or required one that was not given); it is named;
//  - StoreUnavailable: no sentinel answered (the last error is given; SentinelsUnreachable when
//    every one was asked), the named node answered ROLE slave (a stale sentinel), or a sentinel
//    with a configuration as new names another node (step 4): the caller retries, after a pause
//    (RedisSession::reconnect does, elastic/redis_session.h);
//  - RedisIoError (a StoreUnavailable): the named node could not be reached (a primary just lost,
//    before the sentinels fail over): retried the same way.
// Every reconnection must resolve again (a failover changes the address): RedisSession does.
//
// Example:
//   RedisEndpoint primary = resolve_primary(parse_redis_url("redis+sentinel://s1,s2,s3/hdp"), 2s, 5s);
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "elastic/redis_connection.h"
#include "elastic/redis_url.h"

namespace hdp::elastic {

// The primary found through the sentinels: its endpoint (host, port, the data nodes' user,
// password and db; is_sentinel() false) and the connection on which its ROLE was checked, logged
// in and ready for commands.
struct ResolvedPrimary {
  RedisEndpoint endpoint;
  std::unique_ptr<RedisConnection> connection;
};

// Keeps the order in which the sentinels are asked across resolutions. Not thread-safe (RedisSession
// holds one under its mutex).
class SentinelResolver {
 public:
  using Duration = std::chrono::milliseconds;
  using Clock = std::chrono::steady_clock;

  // Throws InvalidArgument when `sentinel_endpoint` is not a sentinel endpoint.
  explicit SentinelResolver(RedisEndpoint sentinel_endpoint);

  // Steps 1-3 above, once. No step waits past `deadline` (the sentinels not yet asked by then are
  // skipped); `connect_timeout` bounds the primary's connection, `command_timeout` its commands.
  ResolvedPrimary connect_primary(Duration connect_timeout, Duration command_timeout,
                                  Clock::time_point deadline = Clock::time_point::max());

  // Step 4 alone, for a connection to `primary` that may have crossed a failover (RedisSession: a
  // reply that came late, or a connection long unused; RedisStoreOptions::late_reply): "host:port" of
  // the node that a sentinel whose configuration is at least as new as any naming `primary` names
  // instead; nothing when the sentinels that answered confirm it, or none answered.
  std::optional<std::string> named_instead(const RedisEndpoint& primary, Duration connect_timeout,
                                           Duration command_timeout, Clock::time_point deadline);

  const RedisEndpoint& endpoint() const { return endpoint_; }  // sentinels in the order they are asked
  // The smallest down-after-milliseconds the sentinels reported at the last confirmation (step 4):
  // no failover happens before the primary has been unreachable about that long. Nothing before one.
  std::optional<Duration> down_after() const { return down_after_; }

 private:
  // What sentinel i says of the master: the address it gives and its configuration epoch (0 when it
  // gives none); nothing when it does not answer (unreachable, no answer, no time left).
  struct SentinelView {
    std::string host;
    int port = 0;
    std::int64_t epoch = 0;
    std::int64_t down_after_ms = 0;  // 0 when it gives none
  };
  std::optional<SentinelView> ask_sentinel(std::size_t i, Duration connect_timeout, Duration command_timeout,
                                           Clock::time_point deadline) const;
  // A connection to sentinel i with the sentinels' short timeouts, none past `remaining`.
  std::unique_ptr<RedisConnection> connect_sentinel(std::size_t i, Duration connect_timeout, Duration command_timeout,
                                                    Duration remaining) const;

  // Steps 1-2: the sentinels asked in turn for the master's address, until one gives it.
  struct AddressSearch {
    std::optional<std::pair<std::string, int>> answer;  // host, port
    std::size_t answered_by = 0;
    std::vector<std::string> knew_nothing;  // the sentinels that answered nil, as host:port
    std::string last_error, auth_failure;
    bool every_one_asked = true;
  };
  // The address, its sentinel moved to the front; or the error of "Errors" above that no answer
  // means. `what` names the endpoint in messages.
  std::pair<std::string, int> find_address(const std::string& what, Duration connect_timeout, Duration command_timeout,
                                            Clock::time_point deadline);
  // Sentinel i asked once; what it said goes into `search`.
  void ask_address(const std::string& what, std::size_t i, Duration connect_timeout, Duration command_timeout,
                   Duration remaining, AddressSearch& search) const;
  // Step 3 on the primary's connection: true when ROLE says master; false when the user may not
  // run ROLE (the node is used unchecked, and step 4 is skipped); throws StoreUnavailable for a
  // node that is not a master (its sentinel moved to the back).
  bool check_role(const std::string& what, ResolvedPrimary& primary, Duration command_timeout,
                  Clock::time_point deadline);
  // Step 4 after a resolution: throws StoreUnavailable when the sentinels refuse `primary`.
  void check_confirmed(const std::string& what, const RedisEndpoint& primary, Duration connect_timeout,
                       Duration command_timeout, Clock::time_point deadline);
  // Every sentinel asked about `primary` (step 4): the newest epoch of those naming it (-1: none),
  // the newest-configured one naming another, whether any answered, whether time ran out.
  struct Confirmation {
    std::int64_t ours = -1;
    std::optional<std::pair<std::size_t, SentinelView>> other;
    bool answered = false;
    bool out_of_time = false;
    bool moved() const { return other && other->second.epoch >= ours; }
  };
  Confirmation confirm(const RedisEndpoint& primary, Duration connect_timeout, Duration command_timeout,
                       Clock::time_point deadline);

  RedisEndpoint endpoint_;
  std::optional<Duration> down_after_;
};

// Whether a ROLE reply says the node is a primary ("master").
bool says_master(const RedisReply& role);

// Every sentinel was asked and none answered (each refused the connection, reset it or timed out):
// what a store may take as "no failover can happen now" (RedisStore then falls back on the last
// primary it found, if that still answers ROLE master). Not thrown when the deadline came before
// every sentinel was asked: a sentinel not asked may be the one that saw a failover.
class SentinelsUnreachable : public StoreUnavailable {
 public:
  using StoreUnavailable::StoreUnavailable;
};

// One resolution with a fresh SentinelResolver; returns the primary's endpoint (the connection that
// checked it is closed).
RedisEndpoint resolve_primary(const RedisEndpoint& sentinel_endpoint, std::chrono::milliseconds connect_timeout,
                              std::chrono::milliseconds command_timeout);

}  // namespace hdp::elastic
