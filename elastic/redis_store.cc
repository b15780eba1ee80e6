#include "elastic/redis_store.h"

#include <algorithm>
#include <thread>

#include "common/log.h"

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

}  // namespace

RedisStore::RedisStore(RedisEndpoint endpoint, RedisStoreOptions options)
    : endpoint_(std::move(endpoint)), options_(options) {
  std::lock_guard lock(mutex_);
  reconnect(Clock::now() + options_.retry_timeout);
}

RedisStore::~RedisStore() = default;

int RedisStore::reconnects() const {
  std::lock_guard lock(mutex_);
  return reconnects_;
}

void RedisStore::reconnect(Clock::time_point deadline) {
  connection_.reset();
  Backoff backoff(options_.backoff);
  for (;;) {
    const auto remaining = std::chrono::duration_cast<Duration>(deadline - Clock::now());
    try {
      connection_ = std::make_unique<RedisConnection>(
          endpoint_, std::clamp(remaining, Duration(1), options_.connect_timeout), options_.command_timeout);
      if (connected_once_) {
        ++reconnects_;
        log()->info("redis at {}: reconnected after {} attempt(s)", endpoint_.display(), backoff.attempts() + 1);
      }
      connected_once_ = true;
      return;
    } catch (const RedisIoError& e) {
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

RedisReply RedisStore::command(const std::vector<std::string_view>& args, bool idempotent) {
  std::lock_guard lock(mutex_);
  const auto deadline = Clock::now() + options_.retry_timeout;
  for (;;) {
    if (!connection_ || !connection_->alive()) reconnect(deadline);
    try {
      return connection_->command(args);
    } catch (const RedisIoError& e) {
      connection_.reset();
      if (!idempotent) {
        throw StoreUnavailable(std::string(e.what()) + " during " + std::string(args.front()) +
                               "; it may or may not have been applied");
      }
      if (Clock::now() >= deadline) throw StoreUnavailable(e.what());
      log()->warn("{}; retrying {}", e.what(), args.front());
    }
  }
}

RedisReply RedisStore::checked(RedisReply reply, std::string_view what) const {
  if (reply.type != RedisReply::Type::kError) return reply;
  if (reply.str.starts_with("NOAUTH") || reply.str.starts_with("NOPERM") || reply.str.starts_with("WRONGPASS")) {
    throw AuthError("redis at " + endpoint_.display() + " refused " + std::string(what) + ": " + reply.str);
  }
  throw InvalidArgument("redis at " + endpoint_.display() + ": " + std::string(what) + " failed: " + reply.str);
}

void RedisStore::set(std::string_view key, std::string_view value) {
  checked(command({"SET", key, value}, true), "SET");
}

void RedisStore::set_with_ttl(std::string_view key, std::string_view value, Duration ttl) {
  checked(command({"SET", key, value, "PX", ttl_ms(ttl, "set_with_ttl")}, true), "SET PX");
}

bool RedisStore::refresh_ttl(std::string_view key, Duration ttl) {
  return checked(command({"PEXPIRE", key, ttl_ms(ttl, "refresh_ttl")}, true), "PEXPIRE").integer == 1;
}

std::optional<std::string> RedisStore::get(std::string_view key) {
  RedisReply reply = checked(command({"GET", key}, true), "GET");
  if (reply.type == RedisReply::Type::kNil) return std::nullopt;
  return std::move(reply.str);
}

std::int64_t RedisStore::add(std::string_view key, std::int64_t delta) {
  RedisReply reply = command({"INCRBY", key, std::to_string(delta)}, false);
  if (reply.type == RedisReply::Type::kError && reply.str.find("not an integer") != std::string::npos) {
    throw InvalidArgument("add: value of key is not a 64-bit integer (" + reply.str + ")");
  }
  return checked(std::move(reply), "INCRBY").integer;
}

bool RedisStore::compare_and_set(std::string_view key, std::optional<std::string_view> expected,
                                 std::string_view desired) {
  RedisReply reply = command({"EVAL", kCompareAndSetScript, "1", key, expected ? "1" : "0",
                              expected.value_or(std::string_view()), desired},
                             false);
  return checked(std::move(reply), "compare_and_set").integer == 1;
}

bool RedisStore::erase(std::string_view key) { return checked(command({"DEL", key}, true), "DEL").integer > 0; }

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

}  // namespace hdp::elastic
