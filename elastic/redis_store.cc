#include "elastic/redis_store.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <deque>
#include <thread>
#include <utility>

#include "common/log.h"
#include "common/text.h"

namespace hdp::elastic {
namespace {

using Clock = std::chrono::steady_clock;

// Atomic compare-and-set. ARGV[1] is "1" when a current value is expected (ARGV[2]), "0" when the
// key must be absent. KEEPTTL keeps a lease's expiry across the swap.
constexpr std::string_view kCompareAndSetScript = R"lua(
local current = redis.call('GET', KEYS[1])
if ARGV[1] == '1' then
  if current ~= ARGV[2] then return 0 end
elseif current then
  return 0
end
redis.call('SET', KEYS[1], ARGV[3], 'KEEPTTL')
return 1
)lua";

// Store::commit(). KEYS: the condition keys, one key per write, then the read keys. ARGV[1]: the
// number of conditions, ARGV[2]: the number of reads; then per condition '1' + value, or '0' + ''
// for "absent"; then per write its op and arguments: set value ttl_ms | del | pexpire ttl_ms |
// hset n f1 v1 .. | xadd maxlen n f1 v1 .. Returns {applied (0/1), read values...}, a missing
// read (or one of another type, as MGET reads it) as false (a nil in the reply); or, when a
// condition or write key holds the wrong type, {-1, index of that key in KEYS, its type, the type
// needed}, so that the error names the key (a Redis error text cannot carry arbitrary key bytes).
// Redis does not roll a script back when a command fails midway, so every type is checked before
// the first write: either all writes happen or none.
constexpr std::string_view kCommitScript = R"lua(
local nc = tonumber(ARGV[1])
local nr = tonumber(ARGV[2])
local last_write = #KEYS - nr
local function reads(applied)
  local out = {applied}
  for k = last_write + 1, #KEYS do
    local value = redis.pcall('GET', KEYS[k])
    if type(value) == 'table' then value = false end
    out[#out + 1] = value
  end
  return out
end
local function wrong_type(k, want)
  return {-1, k, redis.call('TYPE', KEYS[k]).ok, want}
end
local a = 3
for i = 1, nc do
  local current = redis.pcall('GET', KEYS[i])
  if type(current) == 'table' then return wrong_type(i, 'string') end
  if ARGV[a] == '1' then
    if current ~= ARGV[a + 1] then return reads(0) end
  elseif current then
    return reads(0)
  end
  a = a + 2
end
local start = a
for k = nc + 1, last_write do
  local op = ARGV[a]
  if op == 'set' then a = a + 3
  elseif op == 'del' then a = a + 1
  elseif op == 'pexpire' then a = a + 2
  elseif op == 'hset' or op == 'xadd' then
    local want = (op == 'hset') and 'hash' or 'stream'
    local kind = redis.call('TYPE', KEYS[k]).ok
    if kind ~= 'none' and kind ~= want then return wrong_type(k, want) end
    if op == 'hset' then a = a + 2 + 2 * tonumber(ARGV[a + 1]) else a = a + 3 + 2 * tonumber(ARGV[a + 2]) end
  else
    return redis.error_reply('ERR commit: unknown op ' .. tostring(op))
  end
end
a = start
for k = nc + 1, last_write do
  local op = ARGV[a]
  if op == 'set' then
    if ARGV[a + 2] == '0' then redis.call('SET', KEYS[k], ARGV[a + 1])
    else redis.call('SET', KEYS[k], ARGV[a + 1], 'PX', ARGV[a + 2]) end
    a = a + 3
  elseif op == 'del' then
    redis.call('DEL', KEYS[k])
    a = a + 1
  elseif op == 'pexpire' then
    redis.call('PEXPIRE', KEYS[k], ARGV[a + 1])
    a = a + 2
  elseif op == 'hset' then
    local n = tonumber(ARGV[a + 1])
    redis.call('HSET', KEYS[k], unpack(ARGV, a + 2, a + 1 + 2 * n))
    a = a + 2 + 2 * n
  else
    local n = tonumber(ARGV[a + 2])
    redis.call('XADD', KEYS[k], 'MAXLEN', ARGV[a + 1], '*', unpack(ARGV, a + 3, a + 2 + 2 * n))
    a = a + 3 + 2 * n
  end
end
return reads(1)
)lua";

// SCAN's MATCH is a glob; a prefix is matched literally by escaping the glob's special characters.
std::string glob_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 1);
  for (char c : text) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

std::string ttl_ms(Store::Duration ttl, std::string_view what) {
  if (ttl.count() <= 0) throw InvalidArgument(std::string(what) + ": ttl must be > 0 ms");
  return std::to_string(ttl.count());
}

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

// The elements of an MGET-style reply: strings, nil for a missing key (or one of another type).
std::vector<std::optional<std::string>> string_values(RedisReply reply) {
  std::vector<std::optional<std::string>> values;
  values.reserve(reply.elements.size());
  for (auto& element : reply.elements) {
    values.push_back(element.type == RedisReply::Type::kString ? std::optional(std::move(element.str)) : std::nullopt);
  }
  return values;
}

}  // namespace

RedisStore::RedisStore(RedisEndpoint endpoint, RedisStoreOptions options)
    : endpoint_(std::move(endpoint)), options_(options) {
  {
    std::lock_guard lock(mutex_);
    if (endpoint_.is_sentinel()) resolver_.emplace(endpoint_);
    reconnect(Clock::now() + options_.retry_timeout);
    last_used_ = Clock::now();
  }
  if (options_.idle_close.count() > 0) idle_thread_ = std::thread([this] { close_when_idle(); });
}

RedisStore::~RedisStore() {
  if (!idle_thread_.joinable()) return;
  {
    std::lock_guard lock(idle_mutex_);
    stopping_ = true;
  }
  idle_wake_.notify_all();
  idle_thread_.join();
}

void RedisStore::close_when_idle() {
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

int RedisStore::reconnects() const {
  std::lock_guard lock(mutex_);
  return reconnects_;
}

int RedisStore::idle_closes() const {
  std::lock_guard lock(mutex_);
  return idle_closes_;
}

std::string RedisStore::primary() const {
  std::lock_guard lock(mutex_);
  return primary_ ? primary_->display() : std::string();
}

int RedisStore::failovers() const {
  std::lock_guard lock(mutex_);
  return failovers_;
}

int RedisStore::late_replies_dropped() const {
  std::lock_guard lock(mutex_);
  return late_replies_dropped_;
}

ResolvedPrimary RedisStore::open_connection(Duration connect_timeout, Clock::time_point deadline) {
  if (!resolver_) return {endpoint_, std::make_unique<RedisConnection>(endpoint_, connect_timeout, options_.command_timeout)};
  try {
    return resolver_->connect_primary(connect_timeout, options_.command_timeout, deadline);
  } catch (const SentinelsUnreachable& e) {
    // Sentinels are needed only to find a primary. With none answering, no failover can happen
    // either: the last primary found, if it still says ROLE master, is the primary (a connection
    // closed for idleness, or shut down to wake a blocking read, opens again without them). Only
    // when every sentinel was asked: a resolution that ran out of time before asking them all
    // fell back on a primary paused through a failover, once it resumed (the failover test's
    // MONITOR saw an agent's heartbeat read answered by it).
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

void RedisStore::reconnect(Clock::time_point deadline) {
  connection_.reset();
  Backoff backoff(options_.backoff);
  for (;;) {
    const auto remaining = std::chrono::duration_cast<Duration>(deadline - Clock::now());
    try {
      ResolvedPrimary opened = open_connection(std::clamp(remaining, Duration(1), options_.connect_timeout), deadline);
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

std::optional<Store::Duration> RedisStore::failover_check_after() const {
  if (!resolver_ || !primary_) return std::nullopt;
  if (const auto down_after = resolver_->down_after()) return std::max(Duration(1), *down_after / 2);
  return options_.late_reply;
}

std::optional<std::string> RedisStore::primary_moved() {
  // Within a connect timeout of its own: the call's deadline may be gone already.
  return resolver_->named_instead(*primary_, options_.connect_timeout, options_.command_timeout,
                                  Clock::now() + options_.connect_timeout);
}

RedisReply RedisStore::command(const std::vector<std::string_view>& args, bool idempotent) {
  return std::move(pipeline({args}, idempotent).front());
}

std::vector<RedisReply> RedisStore::pipeline(const std::vector<std::vector<std::string_view>>& commands,
                                             bool idempotent) {
  std::lock_guard lock(mutex_);
  const auto deadline = Clock::now() + options_.retry_timeout;
  std::optional<Backoff> refusals;  // after a READONLY / MASTERDOWN reply
  for (;;) {
    if (!connection_ || !connection_->alive()) reconnect(deadline);
    try {
      // No attempt waits past the retry deadline: a caller's budget (an agent's is under a
      // heartbeat interval, elastic/lease_timing.h) bounds the whole call, not each attempt.
      const auto remaining = std::chrono::duration_cast<Duration>(deadline - Clock::now());
      connection_->set_command_timeout(std::clamp(remaining, Duration(1), options_.command_timeout));
      // Sentinel endpoints: a connection unused for half of down-after may have sat through a
      // failover (RedisStoreOptions::late_reply); asked before anything is sent on it.
      if (const auto check = failover_check_after(); check && Clock::now() - confirmed_at_ >= *check) {
        if (const auto moved = primary_moved()) {
          const auto unused = std::chrono::duration_cast<Duration>(Clock::now() - confirmed_at_).count();
          log()->warn("redis at {}: the connection was unused for {} ms and the sentinels name {} now; "
                      "resolving the primary again",
                      primary_->display(), unused, *moved);
          connection_.reset();
          ++late_replies_dropped_;
          continue;
        }
        confirmed_at_ = Clock::now();
      }
      const auto sent = Clock::now();
      auto replies = connection_->pipeline(commands);
      last_used_ = Clock::now();
      if (const auto check = failover_check_after(); check && last_used_ - sent >= *check) {
        // Late: the primary may have been paused through a failover and answered as it resumed,
        // before the sentinels demote it (which discards what it did).
        if (const auto moved = primary_moved()) {
          const auto waited = std::chrono::duration_cast<Duration>(last_used_ - sent).count();
          const std::string reason = "redis at " + primary_->display() + " answered " +
                                     std::string(commands.front().front()) + " after " + std::to_string(waited) +
                                     " ms on the connection from " + local_address(connection_->socket()) +
                                     ", but the sentinels name " + *moved + " now";
          connection_.reset();
          ++late_replies_dropped_;
          if (Clock::now() >= deadline) {
            throw StoreUnavailable(reason + ": the answer of a demoted primary, dropped (gave up after " +
                                   std::to_string(options_.retry_timeout.count()) + " ms of retries)");
          }
          log()->warn("{}: the answer of a demoted primary (what it did is discarded when it turns replica), "
                      "dropped; running it again on the new primary",
                      reason);
          continue;
        }
      }
      confirmed_at_ = last_used_;
      const auto refused = std::find_if(replies.begin(), replies.end(), from_a_replica);
      if (refused == replies.end()) return replies;
      // Not the primary (any more): the next connection goes to the one the sentinels name now.
      const std::string where = primary_ ? primary_->display() : endpoint_.display();
      if (!resolver_) {
        // A plain endpoint: the error is reported as before (checked()); after READONLY the next
        // call connects afresh, in case the name now leads to the primary.
        if (refused->str.starts_with("READONLY")) {
          connection_.reset();
          log()->warn("redis at {} is a replica ({}); closed the connection", where, refused->str);
        }
        return replies;
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

RedisReply RedisStore::eval(std::string_view script, const std::vector<std::string_view>& keys_and_args,
                            std::size_t key_count, bool idempotent) {
  std::string sha;
  {
    std::lock_guard lock(scripts_mutex_);
    if (auto it = script_shas_.find(script); it != script_shas_.end()) sha = it->second;
  }
  if (sha.empty()) {
    sha = checked(command({"SCRIPT", "LOAD", script}, true), "SCRIPT LOAD").str;
    std::lock_guard lock(scripts_mutex_);
    script_shas_.emplace(std::string(script), sha);
  }
  const std::string count = std::to_string(key_count);
  std::vector<std::string_view> args{"EVALSHA", sha, count};
  args.insert(args.end(), keys_and_args.begin(), keys_and_args.end());
  RedisReply reply = command(args, idempotent);
  if (reply.type == RedisReply::Type::kError && reply.str.starts_with("NOSCRIPT")) {
    args[0] = "EVAL";
    args[1] = script;
    reply = command(args, idempotent);
  }
  return reply;
}

RedisReply RedisStore::checked(RedisReply reply, std::string_view what, std::optional<std::string_view> key) const {
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

void RedisStore::set(std::string_view key, std::string_view value) {
  checked(command({"SET", key, value}, true), "SET", key);
}

void RedisStore::set_with_ttl(std::string_view key, std::string_view value, Duration ttl) {
  checked(command({"SET", key, value, "PX", ttl_ms(ttl, "set_with_ttl")}, true), "SET PX", key);
}

Refresh RedisStore::refresh_ttl(std::string_view key, Duration ttl, std::optional<std::string_view> new_value,
                                const std::vector<std::string>& reads) {
  // SET XX and PEXPIRE touch only a live key, so a lease that expired is never revived; both are
  // idempotent, so the pair may be retried after a broken connection.
  const std::string ttl_text = ttl_ms(ttl, "refresh_ttl");
  std::vector<std::vector<std::string_view>> commands;
  if (new_value) {
    commands.push_back({"SET", key, *new_value, "XX", "PX", ttl_text});
  } else {
    commands.push_back({"PEXPIRE", key, ttl_text});
  }
  if (!reads.empty()) {
    commands.emplace_back(std::vector<std::string_view>{"MGET"});
    commands.back().insert(commands.back().end(), reads.begin(), reads.end());
  }
  std::vector<RedisReply> replies = pipeline(commands, true);
  const RedisReply refreshed = checked(std::move(replies[0]), new_value ? "SET XX" : "PEXPIRE", key);
  Refresh result;
  result.alive = new_value ? refreshed.type == RedisReply::Type::kStatus : refreshed.integer == 1;
  if (!reads.empty()) result.values = string_values(checked(std::move(replies[1]), "MGET"));
  return result;
}

std::optional<std::string> RedisStore::get(std::string_view key) {
  RedisReply reply = checked(command({"GET", key}, true), "GET", key);
  if (reply.type == RedisReply::Type::kNil) return std::nullopt;
  return std::move(reply.str);
}

std::int64_t RedisStore::add(std::string_view key, std::int64_t delta) {
  RedisReply reply = command({"INCRBY", key, std::to_string(delta)}, false);
  if (reply.type == RedisReply::Type::kError &&
      (reply.str.find("not an integer") != std::string::npos || reply.str.find("overflow") != std::string::npos)) {
    throw InvalidArgument("add: the value of key " + quote_value(key) + " is not a 64-bit integer, or adding " +
                          std::to_string(delta) + " overflows it (" + quote_value(reply.str) + ")");
  }
  return checked(std::move(reply), "INCRBY", key).integer;
}

bool RedisStore::compare_and_set(std::string_view key, std::optional<std::string_view> expected,
                                 std::string_view desired) {
  RedisReply reply =
      eval(kCompareAndSetScript, {key, expected ? "1" : "0", expected.value_or(std::string_view()), desired}, 1, false);
  return checked(std::move(reply), "compare_and_set", key).integer == 1;
}

bool RedisStore::erase(std::string_view key) { return checked(command({"DEL", key}, true), "DEL", key).integer > 0; }

std::vector<std::string> RedisStore::keys(std::string_view prefix) {
  // SCAN, not KEYS: it never blocks the server for long. The whole scan is one idempotent unit;
  // a reconnect midway restarts a cursor that is only valid on the connection's server anyway.
  const std::string pattern = glob_escape(prefix) + "*";
  std::vector<std::string> result;
  std::string cursor = "0";
  do {
    RedisReply reply = checked(command({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"}, true), "SCAN");
    if (reply.type != RedisReply::Type::kArray || reply.elements.size() != 2) {
      throw InvalidArgument("redis at " + endpoint_.display() + ": unexpected SCAN reply");
    }
    cursor = reply.elements[0].str;
    for (auto& key : reply.elements[1].elements) result.push_back(std::move(key.str));
  } while (cursor != "0");
  // SCAN may return a key more than once.
  std::sort(result.begin(), result.end());
  result.erase(std::unique(result.begin(), result.end()), result.end());
  return result;
}

void RedisStore::wait(const std::vector<std::string>& keys, Duration timeout) {
  // Polling with a growing interval (1 ms .. 50 ms): waits are rare (rendezvous, bootstrap), and
  // polling needs neither keyspace notifications (off by default) nor a second connection.
  std::vector<std::string_view> args{"EXISTS"};
  std::vector<std::string> unique(keys.begin(), keys.end());
  std::sort(unique.begin(), unique.end());
  unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
  if (unique.empty()) return;
  args.insert(args.end(), unique.begin(), unique.end());
  const auto deadline = Clock::now() + timeout;
  Backoff poll_interval({.initial = Duration(1), .max = Duration(50), .multiplier = 2.0, .jitter = 0.0});
  for (;;) {
    if (checked(command(args, true), "EXISTS").integer == static_cast<long long>(unique.size())) return;
    const auto now = Clock::now();
    if (now >= deadline) {
      throw TimeoutError("wait: " + std::to_string(unique.size()) + " key(s) not all present after " +
                         std::to_string(timeout.count()) + " ms");
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(poll_interval.next(), deadline - now));
  }
}

std::vector<std::optional<std::string>> RedisStore::multi_get(const std::vector<std::string>& keys) {
  if (keys.empty()) return {};
  std::vector<std::string_view> args{"MGET"};
  args.insert(args.end(), keys.begin(), keys.end());
  return string_values(checked(command(args, true), "MGET"));
}

std::vector<std::optional<Store::Duration>> RedisStore::remaining_ttl(const std::vector<std::string>& keys) {
  if (keys.empty()) return {};
  std::vector<std::vector<std::string_view>> commands;
  for (const auto& key : keys) commands.push_back({"PTTL", key});
  std::vector<RedisReply> replies = pipeline(commands, true);
  std::vector<std::optional<Duration>> ttls;
  for (std::size_t i = 0; i < replies.size(); ++i) {
    const RedisReply reply = checked(std::move(replies[i]), "PTTL", keys[i]);
    // -2: no such key; -1: no TTL.
    ttls.push_back(reply.integer > 0 ? std::optional(Duration(reply.integer)) : std::nullopt);
  }
  return ttls;
}

std::map<std::string, std::string> RedisStore::hash_get_all(std::string_view key) {
  RedisReply reply = checked(command({"HGETALL", key}, true), "HGETALL", key);
  std::map<std::string, std::string> fields;
  for (std::size_t i = 0; i + 1 < reply.elements.size(); i += 2) {
    fields.emplace(std::move(reply.elements[i].str), std::move(reply.elements[i + 1].str));
  }
  return fields;
}

std::vector<StreamEntry> RedisStore::stream_tail(std::string_view key, std::size_t count) {
  if (count == 0) return {};
  RedisReply reply =
      checked(command({"XREVRANGE", key, "+", "-", "COUNT", std::to_string(count)}, true), "XREVRANGE", key);
  std::vector<StreamEntry> entries;
  for (auto it = reply.elements.rbegin(); it != reply.elements.rend(); ++it) {
    if (it->elements.size() != 2) {
      throw InvalidArgument("redis at " + endpoint_.display() + ": unexpected XREVRANGE reply for key " + quote_value(key));
    }
    StreamEntry entry{std::move(it->elements[0].str), {}};
    auto& flat = it->elements[1].elements;
    for (std::size_t i = 0; i + 1 < flat.size(); i += 2) entry.fields.emplace_back(std::move(flat[i].str), std::move(flat[i + 1].str));
    entries.push_back(std::move(entry));
  }
  return entries;
}

std::vector<StreamEntry> RedisStore::stream_read(std::string_view key, std::string_view after, std::size_t count,
                                                 Duration block) {
  if (count == 0) throw InvalidArgument("stream_read: count must be >= 1");
  const std::string count_text = std::to_string(count), block_text = std::to_string(block.count());
  std::vector<std::string_view> args{"XREAD", "COUNT", count_text};
  // BLOCK 0 would wait for ever: without a wait the read returns at once.
  if (block.count() > 0) args.insert(args.end(), {"BLOCK", block_text});
  args.insert(args.end(), {"STREAMS", key, after});
  RedisReply reply;
  if (block.count() <= 0) {
    reply = command(args, true);
  } else {
    // A blocking read holds the connection (every other call on this store waits for it) and can
    // be woken by stop_stream_reads(), which shuts its socket down.
    std::lock_guard lock(mutex_);
    {
      std::lock_guard blocking(blocking_mutex_);
      if (stream_reads_stopped_) return {};
    }
    try {
      if (!connection_ || !connection_->alive()) reconnect(Clock::now() + options_.retry_timeout);
      {
        std::lock_guard blocking(blocking_mutex_);
        if (stream_reads_stopped_) return {};
        blocking_socket_ = connection_->socket();
      }
      connection_->set_command_timeout(options_.command_timeout + block);
      reply = connection_->command(args);
    } catch (const RedisIoError& e) {
      connection_.reset();
      {
        std::lock_guard blocking(blocking_mutex_);
        blocking_socket_ = -1;
        if (stream_reads_stopped_) return {};
      }
      throw StoreUnavailable(e.what());  // idempotent, but a retry would block again: the caller decides
    }
    std::lock_guard blocking(blocking_mutex_);
    blocking_socket_ = -1;
    last_used_ = Clock::now();
  }
  if (reply.type == RedisReply::Type::kError && reply.str.find("Invalid stream ID") != std::string::npos) {
    throw InvalidArgument("stream_read: " + quote_value(after) + " is not a stream id (<ms>-<seq>)");
  }
  reply = checked(std::move(reply), "XREAD", key);
  std::vector<StreamEntry> entries;
  if (reply.type == RedisReply::Type::kNil) return entries;  // nothing within `block`
  // [[key, [[id, [field, value, ...]], ...]]]
  auto malformed = [&] {
    return InvalidArgument("redis at " + endpoint_.display() + ": unexpected XREAD reply for key " + quote_value(key));
  };
  if (reply.elements.size() != 1 || reply.elements[0].elements.size() != 2) throw malformed();
  for (RedisReply& item : reply.elements[0].elements[1].elements) {
    if (item.elements.size() != 2) throw malformed();
    StreamEntry entry{std::move(item.elements[0].str), {}};
    auto& flat = item.elements[1].elements;
    for (std::size_t i = 0; i + 1 < flat.size(); i += 2) entry.fields.emplace_back(std::move(flat[i].str), std::move(flat[i + 1].str));
    entries.push_back(std::move(entry));
  }
  return entries;
}

void RedisStore::stop_stream_reads() {
  std::lock_guard blocking(blocking_mutex_);
  stream_reads_stopped_ = true;
  if (blocking_socket_ >= 0) ::shutdown(blocking_socket_, SHUT_RDWR);
}

CommitResult RedisStore::commit(const Transaction& transaction) {
  transaction.validate();
  // Numbers formatted here live in `owned` (a deque: growing it never moves its strings, so the
  // views in `args` stay valid); everything else is viewed in place.
  std::deque<std::string> owned;
  std::vector<std::string_view> keys, args;
  for (const auto& condition : transaction.conditions) keys.push_back(condition.key);
  for (const auto& write : transaction.writes) keys.push_back(write.key);
  for (const auto& key : transaction.reads) keys.push_back(key);
  args.push_back(owned.emplace_back(std::to_string(transaction.conditions.size())));
  args.push_back(owned.emplace_back(std::to_string(transaction.reads.size())));
  for (const auto& condition : transaction.conditions) {
    args.push_back(condition.value ? "1" : "0");
    args.push_back(condition.value ? std::string_view(*condition.value) : std::string_view());
  }
  auto push_fields = [&](const Fields& fields) {
    args.push_back(owned.emplace_back(std::to_string(fields.size())));
    for (const auto& [field, value] : fields) {
      args.push_back(field);
      args.push_back(value);
    }
  };
  for (const auto& write : transaction.writes) {
    switch (write.op) {
      case Write::Op::kSet:
        args.insert(args.end(), {"set", write.value});
        args.push_back(owned.emplace_back(std::to_string(write.ttl.count())));
        break;
      case Write::Op::kErase:
        args.push_back("del");
        break;
      case Write::Op::kExpire:
        args.push_back("pexpire");
        args.push_back(owned.emplace_back(std::to_string(write.ttl.count())));
        break;
      case Write::Op::kHashSet:
        args.push_back("hset");
        push_fields(write.fields);
        break;
      case Write::Op::kStreamAppend:
        args.push_back("xadd");
        args.push_back(owned.emplace_back(std::to_string(write.max_length)));
        push_fields(write.fields);
        break;
    }
  }
  std::vector<std::string_view> keys_and_args = keys;
  keys_and_args.insert(keys_and_args.end(), args.begin(), args.end());
  RedisReply reply = checked(eval(kCommitScript, keys_and_args, keys.size(), false), "commit");
  if (reply.type == RedisReply::Type::kArray && reply.elements.size() == 4 && reply.elements[0].integer == -1) {
    const auto index = reply.elements[1].integer;  // 1-based, into `keys`
    if (index >= 1 && static_cast<std::size_t>(index) <= keys.size()) {
      const std::string key(keys[static_cast<std::size_t>(index - 1)]);
      throw WrongType(key, "redis at " + endpoint_.display() + ": commit: key " + quote_value(key) + " holds a " +
                               reply.elements[2].str + ", not a " + reply.elements[3].str +
                               "; nothing was written");
    }
  }
  if (reply.type != RedisReply::Type::kArray || reply.elements.size() != 1 + transaction.reads.size()) {
    throw InvalidArgument("redis at " + endpoint_.display() + ": unexpected commit reply");
  }
  CommitResult result;
  result.applied = reply.elements[0].integer == 1;
  for (std::size_t i = 1; i < reply.elements.size(); ++i) {
    auto& element = reply.elements[i];
    result.values.push_back(element.type == RedisReply::Type::kString ? std::optional(std::move(element.str))
                                                                       : std::nullopt);
  }
  return result;
}

}  // namespace hdp::elastic
