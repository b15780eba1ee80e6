// File: elastic/redis_session.h
//
// RedisStore's session with its data node: the one connection (guarded by a mutex, so commands
// run one at a time), how it is opened and re-opened, and the failure policy every call of the
// store runs under. Private to the Redis layer (elastic/redis_store.cc, elastic/redis_commit.cc).
//
// Failure policy:
//  - A broken connection is re-opened with capped exponential backoff plus jitter, for at most
//    `retry_timeout`; then StoreUnavailable. A server restart is therefore invisible to callers.
//  - Before each command the socket is checked for EOF; a connection the server closed is re-opened
//    before sending, so even a command that must not run twice survives a restart.
//  - When a connection breaks *after* a command was sent, an idempotent call is retried; another
//    throws StoreUnavailable, because the server may have applied it.
//  - Wrong credentials: AuthError naming the server, never the password; no retry.
//  - Through Redis Sentinel (a redis+sentinel:// endpoint): every (re)connection first asks the
//    sentinels for the primary and checks its ROLE (elastic/sentinel.h), inside the same backoff
//    loop: no sentinel answering, a stale sentinel naming a replica, or a primary that cannot be
//    reached yet are retried until `retry_timeout` like a refused connection; an unknown master
//    name (InvalidArgument) and refused credentials (AuthError) are thrown at once. An existing
//    connection never needs the sentinels: they are only asked to re-open one. When none answers,
//    the last primary found is used again if it still answers ROLE master (no failover can happen
//    without them), but only when every sentinel was asked: a resolution that ran out of time
//    before asking them all may otherwise fall back on a primary paused through a failover.
//  - A failover reaches the session in one of four ways, each ending in a new resolution: the
//    sentinels' `CLIENT KILL` of the demoted primary's clients (the EOF check above); a command
//    that times out on a primary that hangs; a reply `READONLY` (a replica), `MASTERDOWN` (a
//    replica without its master) or `NOREPLICAS` (a demoted primary without its replicas); or the
//    late-reply checks (RedisStoreOptions::late_reply): a connection unused for half of the
//    sentinels' down-after is checked with them before anything is sent on it, and a reply that
//    took that long is dropped when they name another primary (the command runs again there: what
//    the old primary did is discarded when it is demoted). A refusal means the command did not
//    run: the connection is dropped and the call retried on the primary re-resolved, within
//    `retry_timeout` (then StoreUnavailable), when it is idempotent or a single command; a pipeline
//    of several non-idempotent commands throws StoreUnavailable saying it may or may not have been
//    applied. From the second refusal of one call on, it pauses with backoff before resolving again.
//  - A plain redis:// endpoint that answers READONLY (a replica, or a demoted primary behind a
//    name that has moved) also drops its connection, so that the next call connects afresh; the
//    call itself gets the refusal as its reply.
//  - No attempt waits past the call's retry deadline: a caller's budget (an agent's is under a
//    heartbeat interval, elastic/lease_timing.h) bounds the whole call, not each attempt.
//
// A blocking command (XREAD BLOCK) holds the connection while it waits (every other call waits
// behind it); stop_blocking() wakes it by shutting its socket down, and every later blocking
// command returns at once; interrupt_blocking() wakes it once and keeps the connection. With RedisStoreOptions::idle_close a thread closes the connection after
// that long without a call; the next call opens it again (not counted as a reconnect).
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "elastic/backoff.h"
#include "elastic/redis_connection.h"
#include "elastic/redis_store.h"
#include "elastic/redis_url.h"
#include "elastic/sentinel.h"

namespace hdp::elastic {

class RedisSession {
 public:
  using Duration = std::chrono::milliseconds;
  using Clock = std::chrono::steady_clock;
  using Command = std::vector<std::string_view>;

  // Connects at once (within retry_timeout); throws StoreUnavailable, AuthError or InvalidArgument.
  // Starts the idle-close thread when options.idle_close > 0.
  RedisSession(RedisEndpoint endpoint, RedisStoreOptions options);
  ~RedisSession();  // stops the idle-close thread
  RedisSession(const RedisSession&) = delete;
  RedisSession& operator=(const RedisSession&) = delete;

  const RedisEndpoint& endpoint() const { return endpoint_; }
  // The counters RedisStore reports (elastic/redis_store.h).
  int reconnects() const;
  int idle_closes() const;
  std::string primary() const;
  int failovers() const;
  int late_replies_dropped() const;

  // Several commands in one round trip under the failure policy above (`idempotent`: whether they
  // may run twice); replies in order. An error reply is returned, not thrown.
  std::vector<RedisReply> pipeline(const std::vector<Command>& commands, bool idempotent);
  // One command that may wait up to `block` on the server, on the connection as it is (re-opened
  // first if broken); not retried: a broken connection throws StoreUnavailable. Nothing when
  // stop_blocking() came before it or woke it.
  std::optional<RedisReply> blocking_command(const Command& args, Duration block);
  // Wakes a blocking command in progress and makes every later one return nothing at once.
  void stop_blocking();
  // Wakes the blocking command in progress once, or the next one when none is (it returns
  // nullopt). The connection stays open: the command is woken from a second, short-lived
  // connection (CLIENT UNBLOCK of the first's id), so that the session never leaves the server's
  // client list on its own account (an agent's presence is read from that list:
  // elastic/agent_presence.h). Returns once the command is woken or has ended, or after
  // kUnblockPatience, when it ends by itself within its block and still returns nullopt.
  void interrupt_blocking();
  static constexpr Duration kUnblockPatience{200};

  // Throws for an error reply, naming the command and its key when it has one: AuthError for a
  // refusal, StoreUnavailable for a server not ready yet (LOADING, BUSY, ...), WrongType for a key
  // of another type, InvalidArgument otherwise. Returns any other reply.
  RedisReply checked(RedisReply reply, std::string_view what, std::optional<std::string_view> key = std::nullopt) const;

 private:
  // Opens a connection (after resolving the primary, for a sentinel endpoint), retrying until
  // `deadline`. Requires mutex_.
  void reconnect(Clock::time_point deadline);
  // One attempt of reconnect(): the connection and the endpoint it went to. Requires mutex_.
  // Through the sentinels; when none answers, the last primary found if it still says ROLE master.
  ResolvedPrimary open_connection(Duration connect_timeout, Clock::time_point deadline);
  // Sentinel endpoints: how long a reply may take, or a connection sit unused, before the sentinels
  // are asked whether the primary moved (RedisStoreOptions::late_reply); nothing otherwise.
  std::optional<Duration> failover_check_after() const;
  // "host:port" of the primary the sentinels name instead of primary_, or nothing (sentinel.h, step 4).
  std::optional<std::string> primary_moved();

  // The checks of one attempt of pipeline(), in the order they run. Each requires mutex_ and a
  // connection; each that returns true has dropped the connection, and the attempt starts over.
  // Before sending: a connection unused for the failover check's time that the sentinels no longer
  // confirm.
  bool moved_while_unused();
  // After a reply that came `sent` .. last_used_: a late reply from a primary the sentinels no
  // longer name (throws StoreUnavailable when the deadline has passed).
  bool late_reply_dropped(const Command& command, Clock::time_point sent, Clock::time_point deadline);
  // After the replies: a refusal from a node that is not the primary. False: the replies are the
  // call's (none refused, or a plain endpoint's refusal); true: run again on the primary resolved
  // again; throws StoreUnavailable when that is not safe or the deadline has passed. `refusals`
  // paces the refusals of one call.
  bool refused_by_replica(const std::vector<Command>& commands, const std::vector<RedisReply>& replies,
                          bool idempotent, Clock::time_point deadline, std::optional<Backoff>& refusals);

  // The idle-close thread's loop (options.idle_close).
  void close_when_idle();

  const RedisEndpoint endpoint_;
  const RedisStoreOptions options_;
  mutable std::mutex mutex_;
  std::unique_ptr<RedisConnection> connection_;  // guarded by mutex_; null while broken
  bool unresolved_logged_ = false;               // guarded by mutex_: connected without the sentinels, logged
  bool connected_once_ = false;                  // guarded by mutex_
  int reconnects_ = 0;                           // guarded by mutex_
  std::optional<SentinelResolver> resolver_;     // guarded by mutex_; set for a sentinel endpoint
  std::optional<RedisEndpoint> primary_;         // guarded by mutex_: where the last connection went
  int failovers_ = 0;                            // guarded by mutex_
  int late_replies_dropped_ = 0;                 // guarded by mutex_
  // guarded by mutex_: when the current connection was last known to reach the primary (its last
  // reply, or the resolution that opened it)
  Clock::time_point confirmed_at_{};
  Clock::time_point last_used_{};  // guarded by mutex_: when the last call ended
  bool idle_closed_ = false;       // guarded by mutex_: the connection was closed for idleness
  int idle_closes_ = 0;            // guarded by mutex_
  std::mutex idle_mutex_;
  std::condition_variable idle_wake_;
  bool stopping_ = false;  // guarded by idle_mutex_
  std::thread idle_thread_;
  // stop_blocking(): set once; the socket of a blocking command in progress (-1: none), which
  // stop_blocking() shuts down to wake it. Both guarded by blocking_mutex_, so that the socket is
  // never shut down after the command ended (its descriptor may have been reused by then).
  std::mutex blocking_mutex_;
  bool blocking_stopped_ = false;
  bool blocking_interrupted_ = false;  // interrupt_blocking() was called; taken by a blocking command
  bool blocking_shut_down_ = false;    // ... and shut its socket down (a connection without an id)
  int blocking_socket_ = -1;
  // The blocking command in progress, for interrupt_blocking(): its connection's server id, the
  // endpoint it went to, and a count of blocking commands (to tell one from the next).
  long long blocking_client_id_ = -1;
  std::optional<RedisEndpoint> blocking_endpoint_;
  std::uint64_t blocking_sequence_ = 0;
};

}  // namespace hdp::elastic
