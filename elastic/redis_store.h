// File: elastic/redis_store.h
//
// The Store over a Redis server, directly (redis://, unix://) or through Redis Sentinel
// (redis+sentinel://, elastic/sentinel.h). One connection, guarded by a mutex, so one RedisStore
// serves many threads one command at a time; open one per thread for parallel traffic. A blocking
// stream_read() holds the connection while it waits: the other calls wait behind it (an agent
// times its reads to end before its next heartbeat, membership_agent.h), and stop_stream_reads()
// wakes it by shutting its socket down. A blocking read is not retried after a broken connection
// (it throws StoreUnavailable: its caller reads again from the id it last saw).
//
// Failure policy (in full: elastic/redis_session.h, which runs it for every call):
//  - A broken connection or a server restart is retried with backoff for at most `retry_timeout`;
//    then StoreUnavailable. A connection the server closed is re-opened before sending, so even
//    add() and compare_and_set() survive a restart without running twice.
//  - When a connection breaks *after* a command was sent, idempotent calls (set, get, erase,
//    keys, ...) are retried; add() and compare_and_set() throw StoreUnavailable, because the
//    server may have applied them.
//  - Wrong credentials: AuthError naming the server, never the password; no retry. An error reply
//    otherwise: StoreUnavailable for a server not ready (LOADING, BUSY, ...), WrongType for a key
//    of another type, InvalidArgument else; each names the command and its key.
//  - Through Redis Sentinel: each (re)connection resolves the primary; a failover (the old
//    primary's connections killed, a command timing out, a reply READONLY / MASTERDOWN /
//    NOREPLICAS, or a late reply from a primary the sentinels no longer name) ends in a new
//    resolution and the call retried there within `retry_timeout`, also add(),
//    compare_and_set() and commit() (a refused command did not run; a dropped late reply is
//    discarded with the demoted primary's data); a pipeline of several non-idempotent commands
//    throws StoreUnavailable saying it may or may not have been applied. primary() names the node
//    in use, failovers() counts its changes.
//  - A plain redis:// endpoint that answers READONLY drops its connection, so that the next call
//    connects afresh; the call itself fails (InvalidArgument naming the command).
// compare_and_set() and commit() run Lua scripts (elastic/redis_commit.h): commit() is all or
// nothing.
//
// Example:
//   auto store = std::make_shared<RedisStore>(parse_redis_url("redis://127.0.0.1:6379"));
//   store->set_with_ttl("hdp:job:node:n1", "alive", 5s);
//   RedisStore ha(parse_redis_url("redis+sentinel://s1:26379,s2:26379,s3:26379/hdp"));
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "elastic/backoff.h"
#include "elastic/redis_connection.h"
#include "elastic/redis_url.h"
#include "elastic/store.h"

namespace hdp::elastic {

class RedisSession;  // elastic/redis_session.h
class RedisScripts;  // elastic/redis_commit.h

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
  // Non-empty: every connection opened is named so (CLIENT SETNAME; elastic/agent_presence.h), so
  // that the server's client list says whether this process is still connected.
  std::string client_name;
};

class RedisStore final : public Store {
 public:
  // Connects at once (within retry_timeout); throws StoreUnavailable, AuthError or InvalidArgument.
  explicit RedisStore(RedisEndpoint endpoint, RedisStoreOptions options = {});
  ~RedisStore() override;

  const RedisEndpoint& endpoint() const;
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
  void interrupt_stream_reads() override;
  CommitResult commit(const Transaction& transaction) override;

  // Runs any command with the retry policy above (`idempotent` says whether it may run twice).
  // An error reply from the server is returned, not thrown.
  RedisReply command(const std::vector<std::string_view>& args, bool idempotent);
  // Several commands in one round trip, with the same policy; replies in order.
  std::vector<RedisReply> pipeline(const std::vector<std::vector<std::string_view>>& commands, bool idempotent);
  // The names of the server's normal clients connected now (CLIENT LIST TYPE normal), unnamed ones
  // left out. Throws StoreUnavailable, or InvalidArgument for a reply it cannot read.
  std::vector<std::string> client_names() const;

 private:
  std::unique_ptr<RedisSession> session_;  // the connection and the failure policy
  std::unique_ptr<RedisScripts> scripts_;  // on session_
};

}  // namespace hdp::elastic
