// File: elastic/redis_session.cc
//
// RedisSession (elastic/redis_session.h): opening the connection (through the sentinels for a
// sentinel endpoint), the retry loop of every call and its failover checks, blocking commands,
// error replies turned into exceptions, and the idle-close thread.
#include "elastic/redis_session.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <thread>
#include <utility>

#include "common/log.h"
#include "common/text.h"

namespace hdp::elastic {
namespace {

using Clock = RedisSession::Clock;
using Duration = RedisSession::Duration;

// "ip:port" of a socket's own end (a client connection as the server's CLIENT LIST and MONITOR
// name it); "?" when it cannot be read.
std::string local_address(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (fd < 0 || getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "?";
  char text[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &a->sin_addr, text, sizeof(text));
    return std::string(text) + ":" + std::to_string(ntohs(a->sin_port));
  }
  if (addr.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof(text));
    return "[" + std::string(text) + "]:" + std::to_string(ntohs(a->sin6_port));
  }
  return "?";
}

// A reply saying the node is not the primary: a replica refusing a write (READONLY), a replica
// without its master refusing anything (MASTERDOWN), or a primary without the replicas
// `min-replicas-to-write` asks for (NOREPLICAS: a demoted primary that resumed after a failover,
// its replicas gone to the new one). Either way the command did not run.
bool from_a_replica(const RedisReply& reply) {
  return reply.type == RedisReply::Type::kError &&
         (reply.str.starts_with("READONLY") || reply.str.starts_with("MASTERDOWN") ||
          reply.str.starts_with("NOREPLICAS"));
}

}  // namespace

RedisSession::RedisSession(RedisEndpoint endpoint, RedisStoreOptions options)
    : endpoint_(std::move(endpoint)), options_(options) {
  {
    std::lock_guard lock(mutex_);
    if (endpoint_.is_sentinel()) resolver_.emplace(endpoint_);
    reconnect(Clock::now() + options_.retry_timeout);
    last_used_ = Clock::now();
  }
  if (options_.idle_close.count() > 0) idle_thread_ = std::thread([this] { close_when_idle(); });
}

RedisSession::~RedisSession() {
  if (!idle_thread_.joinable()) return;
  {
    std::lock_guard lock(idle_mutex_);
    stopping_ = true;
  }
  idle_wake_.notify_all();
  idle_thread_.join();
}

void RedisSession::close_when_idle() {
  const Duration every = std::max(Duration(50), options_.idle_close / 2);
  std::unique_lock idle(idle_mutex_);
  while (!idle_wake_.wait_for(idle, every, [&] { return stopping_; })) {
    std::lock_guard lock(mutex_);
    if (connection_ && Clock::now() - last_used_ >= options_.idle_close) {
      connection_.reset();
      idle_closed_ = true;
      ++idle_closes_;
    }
  }
}

int RedisSession::reconnects() const {
  std::lock_guard lock(mutex_);
  return reconnects_;
}

int RedisSession::idle_closes() const {
  std::lock_guard lock(mutex_);
  return idle_closes_;
}

std::string RedisSession::primary() const {
  std::lock_guard lock(mutex_);
  return primary_ ? primary_->display() : std::string();
}

int RedisSession::failovers() const {
  std::lock_guard lock(mutex_);
  return failovers_;
}

int RedisSession::late_replies_dropped() const {
  std::lock_guard lock(mutex_);
  return late_replies_dropped_;
}

ResolvedPrimary RedisSession::open_connection(Duration connect_timeout, Clock::time_point deadline) {
  if (!resolver_) return {endpoint_, std::make_unique<RedisConnection>(endpoint_, connect_timeout, options_.command_timeout)};
  try {
    return resolver_->connect_primary(connect_timeout, options_.command_timeout, deadline);
  } catch (const SentinelsUnreachable& e) {
    // Sentinels are needed only to find a primary. With none answering, no failover can happen
    // either: the last primary found, if it still says ROLE master, is the primary (a connection
    // closed for idleness, or shut down to wake a blocking read, opens again without them). Only
    // when every sentinel was asked (SentinelsUnreachable): a resolution that ran out of time
    // before asking them all could fall back on a primary paused through a failover, once it
    // resumed.
    if (!primary_) throw;
    auto connection = std::make_unique<RedisConnection>(*primary_, connect_timeout, options_.command_timeout);
    if (!says_master(connection->command({"ROLE"}))) throw;
    if (!unresolved_logged_) {
      log()->warn("{}; connected to the last primary found, {}, which still answers ROLE master", e.what(),
                  primary_->display());
      unresolved_logged_ = true;
    }
    return {*primary_, std::move(connection)};
  }
}

void RedisSession::reconnect(Clock::time_point deadline) {
  connection_.reset();
  Backoff backoff(options_.backoff);
  for (;;) {
    const auto remaining = std::chrono::duration_cast<Duration>(deadline - Clock::now());
    try {
      ResolvedPrimary opened = open_connection(std::clamp(remaining, Duration(1), options_.connect_timeout), deadline);
      if (!options_.client_name.empty()) {
        const RedisReply named = opened.connection->command({"CLIENT", "SETNAME", options_.client_name});
        if (named.type == RedisReply::Type::kError) {
          throw InvalidArgument("redis at " + opened.endpoint.display() + ": cannot name the connection " +
                                quote_value(options_.client_name) + ": " + named.str);
        }
      }
      connection_ = std::move(opened.connection);
      if (primary_ && (primary_->host != opened.endpoint.host || primary_->port != opened.endpoint.port)) {
        ++failovers_;
        log()->info("redis: primary moved from {} to {}", primary_->display(), opened.endpoint.display());
      }
      primary_ = std::move(opened.endpoint);
      if (std::exchange(idle_closed_, false)) {
        // Opened again after it was closed for idleness: not a reconnect.
      } else if (connected_once_) {
        ++reconnects_;
        log()->info("redis at {}: reconnected after {} attempt(s)", primary_->display(), backoff.attempts() + 1);
      }
      connected_once_ = true;
      confirmed_at_ = Clock::now();
      return;
    } catch (const StoreUnavailable& e) {
      // RedisIoError (refused, reset, timed out) and, through the sentinels, no sentinel answering
      // or a stale one naming a replica: all pass with time. AuthError and InvalidArgument do not.
      const auto pause = backoff.next();
      if (Clock::now() + pause >= deadline) {
        throw StoreUnavailable(std::string(e.what()) + " (gave up after " +
                               std::to_string(options_.retry_timeout.count()) + " ms of retries)");
      }
      log()->warn("{}; retrying in {} ms", e.what(), pause.count());
      std::this_thread::sleep_for(pause);
    }
  }
}

std::optional<Duration> RedisSession::failover_check_after() const {
  if (!resolver_ || !primary_) return std::nullopt;
  if (const auto down_after = resolver_->down_after()) return std::max(Duration(1), *down_after / 2);
  return options_.late_reply;
}

std::optional<std::string> RedisSession::primary_moved() {
  // Within a connect timeout of its own: the call's deadline may be gone already.
  return resolver_->named_instead(*primary_, options_.connect_timeout, options_.command_timeout,
                                  Clock::now() + options_.connect_timeout);
}

std::vector<RedisReply> RedisSession::pipeline(const std::vector<Command>& commands, bool idempotent) {
  std::lock_guard lock(mutex_);
  const auto deadline = Clock::now() + options_.retry_timeout;
  std::optional<Backoff> refusals;  // after a READONLY / MASTERDOWN reply
  for (;;) {
    if (!connection_ || !connection_->alive()) reconnect(deadline);
    try {
      // No attempt waits past the retry deadline.
      const auto remaining = std::chrono::duration_cast<Duration>(deadline - Clock::now());
      connection_->set_command_timeout(std::clamp(remaining, Duration(1), options_.command_timeout));
      if (moved_while_unused()) continue;
      const auto sent = Clock::now();
      auto replies = connection_->pipeline(commands);
      last_used_ = Clock::now();
      if (late_reply_dropped(commands.front(), sent, deadline)) continue;
      confirmed_at_ = last_used_;
      if (!refused_by_replica(commands, replies, idempotent, deadline, refusals)) return replies;
    } catch (const RedisIoError& e) {
      connection_.reset();
      if (!idempotent) {
        throw StoreUnavailable(std::string(e.what()) + " during " + std::string(commands.front().front()) +
                               "; it may or may not have been applied");
      }
      if (Clock::now() >= deadline) throw StoreUnavailable(e.what());
      log()->warn("{}; retrying {}", e.what(), commands.front().front());
    }
  }
}

bool RedisSession::moved_while_unused() {
  // A connection unused for half of down-after may have sat through a failover: asked before
  // anything is sent on it.
  const auto check = failover_check_after();
  if (!check || Clock::now() - confirmed_at_ < *check) return false;
  if (const auto moved = primary_moved()) {
    const auto unused = std::chrono::duration_cast<Duration>(Clock::now() - confirmed_at_).count();
    log()->warn("redis at {}: the connection was unused for {} ms and the sentinels name {} now; "
                "resolving the primary again",
                primary_->display(), unused, *moved);
    connection_.reset();
    ++late_replies_dropped_;
    return true;
  }
  confirmed_at_ = Clock::now();
  return false;
}

bool RedisSession::late_reply_dropped(const Command& command, Clock::time_point sent, Clock::time_point deadline) {
  // Late: the primary may have been paused through a failover and answered as it resumed, before
  // the sentinels demote it (which discards what it did).
  const auto check = failover_check_after();
  if (!check || last_used_ - sent < *check) return false;
  const auto moved = primary_moved();
  if (!moved) return false;
  const auto waited = std::chrono::duration_cast<Duration>(last_used_ - sent).count();
  const std::string reason = "redis at " + primary_->display() + " answered " + std::string(command.front()) +
                             " after " + std::to_string(waited) + " ms on the connection from " +
                             local_address(connection_->socket()) + ", but the sentinels name " + *moved + " now";
  connection_.reset();
  ++late_replies_dropped_;
  if (Clock::now() >= deadline) {
    throw StoreUnavailable(reason + ": the answer of a demoted primary, dropped (gave up after " +
                           std::to_string(options_.retry_timeout.count()) + " ms of retries)");
  }
  log()->warn("{}: the answer of a demoted primary (what it did is discarded when it turns replica), "
              "dropped; running it again on the new primary",
              reason);
  return true;
}

bool RedisSession::refused_by_replica(const std::vector<Command>& commands, const std::vector<RedisReply>& replies,
                                      bool idempotent, Clock::time_point deadline, std::optional<Backoff>& refusals) {
  const auto refused = std::find_if(replies.begin(), replies.end(), from_a_replica);
  if (refused == replies.end()) return false;
  // Not the primary (any more): the next connection goes to the one the sentinels name now.
  const std::string where = primary_ ? primary_->display() : endpoint_.display();
  if (!resolver_) {
    // A plain endpoint: the error is reported as before (checked()); after READONLY the next
    // call connects afresh, in case the name now leads to the primary.
    if (refused->str.starts_with("READONLY")) {
      connection_.reset();
      log()->warn("redis at {} is a replica ({}); closed the connection", where, refused->str);
    }
    return false;
  }
  connection_.reset();
  const auto& refused_command = commands[static_cast<std::size_t>(refused - replies.begin())];
  const std::string reason =
      "redis at " + where + " refused " + std::string(refused_command.front()) + ": " + refused->str;
  // A refusal means that command did not run; a single command may therefore run again even
  // when it is not idempotent. Of several, another may have run before the node turned away.
  if (!idempotent && commands.size() > 1) {
    throw StoreUnavailable(reason + " (not the primary); it may or may not have been applied");
  }
  if (Clock::now() >= deadline) {
    throw StoreUnavailable(reason + " (not the primary; gave up after " +
                           std::to_string(options_.retry_timeout.count()) + " ms of retries)");
  }
  log()->warn("{} (not the primary); resolving the primary again", reason);
  // The ROLE check of a resolution normally keeps a replica out; if it could not run (an ACL
  // user without ROLE) the same replica may come back: pause from the second refusal on.
  if (refusals) {
    std::this_thread::sleep_for(std::min<Clock::duration>(refusals->next(), deadline - Clock::now()));
  } else {
    refusals.emplace(options_.backoff);
  }
  return true;
}

std::optional<RedisReply> RedisSession::blocking_command(const Command& args, Duration block) {
  std::lock_guard lock(mutex_);
  {
    std::lock_guard blocking(blocking_mutex_);
    if (blocking_stopped_ || std::exchange(blocking_interrupted_, false)) return std::nullopt;
  }
  RedisReply reply;
  try {
    if (!connection_ || !connection_->alive()) reconnect(Clock::now() + options_.retry_timeout);
    const long long id = connection_->client_id();
    {
      std::lock_guard blocking(blocking_mutex_);
      if (blocking_stopped_) return std::nullopt;
      if (std::exchange(blocking_interrupted_, false)) return std::nullopt;  // interrupted while connecting
      blocking_socket_ = connection_->socket();
      blocking_client_id_ = id;
      blocking_endpoint_ = primary_;
      ++blocking_sequence_;
    }
    connection_->set_command_timeout(options_.command_timeout + block);
    reply = connection_->command(args);
  } catch (const RedisIoError& e) {
    connection_.reset();
    {
      std::lock_guard blocking(blocking_mutex_);
      blocking_socket_ = -1;
      blocking_shut_down_ = false;
      if (std::exchange(blocking_interrupted_, false)) {
        idle_closed_ = true;  // shut down on purpose (a connection without an id): no reconnect
        return std::nullopt;
      }
      if (blocking_stopped_) return std::nullopt;
    }
    throw StoreUnavailable(e.what());  // idempotent, but a retry would block again: the caller decides
  }
  std::lock_guard blocking(blocking_mutex_);
  blocking_socket_ = -1;
  last_used_ = Clock::now();
  if (std::exchange(blocking_shut_down_, false)) {  // the reply came first, then the fallback shut it down
    connection_.reset();
    idle_closed_ = true;
  }
  // Woken by CLIENT UNBLOCK (a nil reply), or the reply came first: either way the interrupt is
  // this command's.
  if (std::exchange(blocking_interrupted_, false)) return std::nullopt;
  return reply;
}

void RedisSession::interrupt_blocking() {
  long long id = -1;
  RedisEndpoint where;
  std::uint64_t sequence = 0;
  {
    std::lock_guard blocking(blocking_mutex_);
    blocking_interrupted_ = true;  // taken by the blocking command under way, else by the next one
    if (blocking_socket_ < 0 || !blocking_endpoint_) return;
    if (blocking_client_id_ < 0) {  // no id to wake it by: shut its socket down (the connection closes)
      ::shutdown(blocking_socket_, SHUT_RDWR);
      blocking_shut_down_ = true;
      return;
    }
    id = blocking_client_id_;
    where = *blocking_endpoint_;
    sequence = blocking_sequence_;
  }
  const auto in_progress = [&] {
    std::lock_guard blocking(blocking_mutex_);
    return blocking_socket_ >= 0 && blocking_sequence_ == sequence;
  };
  const std::string id_text = std::to_string(id);
  const auto deadline = Clock::now() + kUnblockPatience;
  try {
    RedisConnection side(where, std::min(options_.connect_timeout, kUnblockPatience), options_.command_timeout);
    // UNBLOCK answers 0 for a command not blocked yet (sent, not yet read by the server): ask
    // again until it is woken or has ended.
    while (in_progress()) {
      const RedisReply woken = side.command({"CLIENT", "UNBLOCK", id_text});
      if (woken.type == RedisReply::Type::kInteger && woken.integer == 1) return;
      if (Clock::now() >= deadline) break;
      std::this_thread::sleep_for(Duration(1));
    }
  } catch (const std::exception& e) {  // unreachable or refused: the read ends at its timeout
    log()->warn("redis at {}: cannot wake the blocking read (CLIENT UNBLOCK): {}", where.display(), e.what());
  }
  if (in_progress()) {
    log()->info("redis at {}: the blocking read was not woken within {} ms; it ends at its own timeout",
                where.display(), kUnblockPatience.count());
  }
}

void RedisSession::stop_blocking() {
  std::lock_guard blocking(blocking_mutex_);
  blocking_stopped_ = true;
  if (blocking_socket_ >= 0) ::shutdown(blocking_socket_, SHUT_RDWR);
}

RedisReply RedisSession::checked(RedisReply reply, std::string_view what, std::optional<std::string_view> key) const {
  if (reply.type != RedisReply::Type::kError) return reply;
  // "GET of key 'hdp:j:leader'": every error of a command on one key names it.
  const std::string command = key ? std::string(what) + " of key " + quote_value(*key) : std::string(what);
  const std::string error = quote_value(reply.str);
  if (reply.str.starts_with("NOAUTH") || reply.str.starts_with("NOPERM") || reply.str.starts_with("WRONGPASS")) {
    throw AuthError("redis at " + endpoint_.display() + " refused " + command + ": " + error);
  }
  // The server is starting, busy with a script, or failing over: the command did not run, and
  // will once the server is ready again, like after a broken connection.
  for (const char* transient : {"LOADING", "BUSY", "TRYAGAIN", "MASTERDOWN", "CLUSTERDOWN", "NOREPLICAS"}) {
    if (reply.str.starts_with(transient)) {
      throw StoreUnavailable("redis at " + endpoint_.display() + " could not run " + command + " now: " + error);
    }
  }
  const std::string message = "redis at " + endpoint_.display() + ": " + command + " failed: " + error;
  if (key && reply.str.starts_with("WRONGTYPE")) throw WrongType(std::string(*key), message);
  throw InvalidArgument(message);
}

}  // namespace hdp::elastic
