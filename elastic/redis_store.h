// File: elastic/redis_store.h
//
// The Store over a Redis server (hiredis). One connection, guarded by a mutex, so one RedisStore
// serves many threads one command at a time; open one per thread for parallel traffic. A blocking
// stream_read() holds the connection while it waits: the other calls wait behind it (an agent
// times its reads to end before its next heartbeat, membership_agent.h), and stop_stream_reads()
// wakes it by shutting its socket down. A blocking read is not retried after a broken connection
// (it throws StoreUnavailable: its caller reads again from the id it last saw).
//
// Failure policy:
//  - A broken connection is re-opened with capped exponential backoff plus jitter, for at most
//    `retry_timeout`; then StoreUnavailable. A server restart is therefore invisible to callers.
//  - Before each command the socket is checked for EOF; a connection the server closed is re-opened
//    before sending, so even add() and compare_and_set() survive a restart without running twice.
//  - When a connection breaks *after* a command was sent, idempotent commands (set, get, erase,
//    keys, ...) are retried; add() and compare_and_set() throw StoreUnavailable, because the
//    server may have applied them.
//  - Wrong credentials: AuthError naming the server, never the password; no retry.
//  - Through Redis Sentinel (a redis+sentinel:// endpoint): every (re)connection first asks the
//    sentinels for the primary and checks its ROLE (elastic/sentinel.h), inside the same backoff
//    loop: no sentinel answering, a stale sentinel naming a replica, or a primary that cannot be
//    reached yet are retried until `retry_timeout` like a refused connection; an unknown master
//    name (InvalidArgument) and refused credentials (AuthError) are thrown at once. An existing
//    connection never needs the sentinels: they are only asked to re-open one. A failover reaches
//    the client in one of three ways, each ending in a new resolution: Sentinel's `CLIENT KILL`
//    of the demoted primary's clients (the EOF check above); a command that times out on a
//    primary that hangs; or a reply `READONLY` (a replica) or `MASTERDOWN` (a replica without
//    its master). Those two replies mean the command did not run: the connection is dropped and
//    the call retried on the primary re-resolved, within `retry_timeout` (then StoreUnavailable),
//    when it is idempotent or a single command (add(), compare_and_set(), commit() included); a
//    pipeline of several non-idempotent commands throws StoreUnavailable saying it may or may not
//    have been applied. primary() names the node in use, failovers() counts its changes.
//  - A plain redis:// endpoint that answers READONLY (a replica, or a demoted primary behind a
//    name that has moved) also drops its connection, so that the next call connects afresh; the
//    call itself fails (InvalidArgument naming the command).
//
// Example:
//   auto store = std::make_shared<RedisStore>(parse_redis_url("redis://127.0.0.1:6379"));
//   store->set_with_ttl("hdp:job:node:n1", "alive", 5s);
//   RedisStore ha(parse_redis_url("redis+sentinel://s1:26379,s2:26379,s3:26379/hdp"));
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <optional>

#include "elastic/backoff.h"
#include "elastic/redis_connection.h"
#include "elastic/redis_url.h"
#include "elastic/sentinel.h"
#include "elastic/store.h"

namespace hdp::elastic {

struct RedisStoreOptions {
  std::chrono::milliseconds connect_timeout{2000};  // one connect + log-in attempt
  std::chrono::milliseconds command_timeout{5000};  // one command's round trip
  std::chrono::milliseconds retry_timeout{10000};   // one call gives up after this (StoreUnavailable); no
                                                    // attempt waits past it
  BackoffOptions backoff{};
  // > 0: the connection is closed after this long without a call, and opened again by the next
  // one (not counted as a reconnect). A worker, which only needs the store around a generation
  // change, then holds no connection while it trains: a job's connections stay near its number of
  // nodes (its agents), not of its ranks.
  std::chrono::milliseconds idle_close{0};
  // Sentinel endpoints: a primary paused through a failover answers, as it resumes and until the
  // sentinels demote it (seconds), what was sent to it and what comes on the connections it still
  // has, and its writes are discarded at the demotion. A failover needs the primary unreachable
  // for the sentinels' down-after-milliseconds, so a connection that crossed one either waited
  // that long for a reply or sat unused that long. Past half of down-after (as the sentinels
  // report it; this value until they have), the store asks the sentinels (elastic/sentinel.h,
  // step 4): before it sends on a connection unused that long (when they name another primary,
  // nothing is sent there), and after a reply that took that long (when they name another, the
  // reply is dropped and the command runs again on the new primary, also one that is not
  // idempotent: what the old one did with it is discarded at the demotion).
  std::chrono::milliseconds late_reply{500};
};

class RedisStore final : public Store {
 public:
  // Connects at once (within retry_timeout); throws StoreUnavailable, AuthError or InvalidArgument.
  explicit RedisStore(RedisEndpoint endpoint, RedisStoreOptions options = {});
  ~RedisStore() override;

  const RedisEndpoint& endpoint() const { return endpoint_; }
  // How many times the connection was re-opened since construction (for tests and status); a
  // connection closed for being idle and opened again is not counted, but in idle_closes().
  int reconnects() const;
  int idle_closes() const;
  // The data node of the last connection opened ("host:port", its display()); "" before the
  // first. For a sentinel endpoint, the primary it resolved to.
  std::string primary() const;
  // How many times a new connection went to another primary than the previous one (a failover
  // seen through the sentinels); each is logged ("redis: primary moved from A to B").
  int failovers() const;
  // How many replies were dropped as a demoted primary's, and connections left unused because the
  // sentinels named another primary when they were checked (RedisStoreOptions::late_reply).
  int late_replies_dropped() const;

  void set(std::string_view key, std::string_view value) override;
  void set_with_ttl(std::string_view key, std::string_view value, Duration ttl) override;
  Refresh refresh_ttl(std::string_view key, Duration ttl, std::optional<std::string_view> new_value,
                      const std::vector<std::string>& reads) override;
  std::optional<std::string> get(std::string_view key) override;
  std::int64_t add(std::string_view key, std::int64_t delta) override;
  bool compare_and_set(std::string_view key, std::optional<std::string_view> expected,
                       std::string_view desired) override;
  bool erase(std::string_view key) override;
  std::vector<std::string> keys(std::string_view prefix) override;
  void wait(const std::vector<std::string>& keys, Duration timeout) override;
  std::vector<std::optional<std::string>> multi_get(const std::vector<std::string>& keys) override;
  std::vector<std::optional<Duration>> remaining_ttl(const std::vector<std::string>& keys) override;
  std::map<std::string, std::string> hash_get_all(std::string_view key) override;
  std::vector<StreamEntry> stream_tail(std::string_view key, std::size_t count) override;
  std::vector<StreamEntry> stream_read(std::string_view key, std::string_view after, std::size_t count,
                                       Duration block) override;
  void stop_stream_reads() override;
  CommitResult commit(const Transaction& transaction) override;

  // Runs any command with the retry policy above (`idempotent` says whether it may run twice).
  // An error reply from the server is returned, not thrown.
  RedisReply command(const std::vector<std::string_view>& args, bool idempotent);
  // Several commands in one round trip, with the same policy; replies in order.
  std::vector<RedisReply> pipeline(const std::vector<std::vector<std::string_view>>& commands, bool idempotent);

 private:
  // Runs a Lua script by its SHA (EVALSHA), loading it on a NOSCRIPT reply (a restarted server
  // has an empty script cache; NOSCRIPT means the script did not run, so a retry is safe).
  RedisReply eval(std::string_view script, const std::vector<std::string_view>& keys_and_args, std::size_t key_count,
                  bool idempotent);
  // Opens a connection (after resolving the primary, for a sentinel endpoint), retrying until
  // `deadline`. Requires mutex_.
  void reconnect(std::chrono::steady_clock::time_point deadline);
  // Sentinel endpoints: how long a reply may take, or a connection sit unused, before the sentinels
  // are asked whether the primary moved (RedisStoreOptions::late_reply); nothing otherwise.
  std::optional<Duration> failover_check_after() const;
  // "host:port" of the primary the sentinels name instead of primary_, or nothing (step 4).
  std::optional<std::string> primary_moved();
  // One attempt of reconnect(): the connection and the endpoint it went to. Requires mutex_.
  // Through the sentinels; when none answers, the last primary found if it still says ROLE master.
  ResolvedPrimary open_connection(std::chrono::milliseconds connect_timeout,
                                  std::chrono::steady_clock::time_point deadline);
  // Throws for an error reply, naming the command and its key when it has one: AuthError for a
  // refusal, StoreUnavailable for a server not ready yet (LOADING, BUSY, ...), WrongType for a key
  // of another type, InvalidArgument otherwise.
  RedisReply checked(RedisReply reply, std::string_view what, std::optional<std::string_view> key = std::nullopt) const;

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
  std::chrono::steady_clock::time_point confirmed_at_{};
  std::chrono::steady_clock::time_point last_used_{};  // guarded by mutex_: when the last call ended
  bool idle_closed_ = false;                     // guarded by mutex_: the connection was closed for idleness
  int idle_closes_ = 0;                          // guarded by mutex_
  // With options.idle_close: a thread that closes the idle connection; stopped by the destructor.
  void close_when_idle();
  std::mutex idle_mutex_;
  std::condition_variable idle_wake_;
  bool stopping_ = false;  // guarded by idle_mutex_
  std::thread idle_thread_;
  // stop_stream_reads(): set once; the socket of a blocking read in progress (-1: none), which
  // stop_stream_reads() shuts down to wake it. Both guarded by blocking_mutex_, so that the socket
  // is never shut down after the read ended (its descriptor may have been reused by then).
  std::mutex blocking_mutex_;
  bool stream_reads_stopped_ = false;
  int blocking_socket_ = -1;
  std::mutex scripts_mutex_;
  std::map<std::string, std::string, std::less<>> script_shas_;  // script text -> SHA1; guarded by scripts_mutex_
};

}  // namespace hdp::elastic
