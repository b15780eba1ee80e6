// File: elastic/redis_store.cc
//
// RedisStore's verbs (elastic/redis_store.h): each Store call as the Redis commands it sends and
// the decoding of their replies. The connection and its failure policy are the session's
// (elastic/redis_session.h), the scripts and the commit's encoding elastic/redis_commit.h's.
#include "elastic/redis_store.h"

#include <algorithm>
#include <deque>
#include <thread>
#include <utility>

#include "common/text.h"
#include "elastic/redis_commit.h"
#include "elastic/redis_session.h"

namespace hdp::elastic {
namespace {

using Clock = std::chrono::steady_clock;

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

// The entries of an XRANGE-style reply ([[id, [field, value, ...]], ...]), in the reply's order;
// an item of another shape is an unexpected `command` reply.
std::vector<StreamEntry> stream_entries(std::vector<RedisReply>& items, const RedisEndpoint& endpoint,
                                        std::string_view command, std::string_view key) {
  std::vector<StreamEntry> entries;
  entries.reserve(items.size());
  for (RedisReply& item : items) {
    if (item.elements.size() != 2) {
      throw InvalidArgument("redis at " + endpoint.display() + ": unexpected " + std::string(command) +
                            " reply for key " + quote_value(key));
    }
    StreamEntry entry{std::move(item.elements[0].str), {}};
    auto& flat = item.elements[1].elements;
    for (std::size_t i = 0; i + 1 < flat.size(); i += 2) entry.fields.emplace_back(std::move(flat[i].str), std::move(flat[i + 1].str));
    entries.push_back(std::move(entry));
  }
  return entries;
}

}  // namespace

RedisStore::RedisStore(RedisEndpoint endpoint, RedisStoreOptions options)
    : session_(std::make_unique<RedisSession>(std::move(endpoint), options)),
      scripts_(std::make_unique<RedisScripts>(*session_)) {}

RedisStore::~RedisStore() = default;

const RedisEndpoint& RedisStore::endpoint() const { return session_->endpoint(); }
int RedisStore::reconnects() const { return session_->reconnects(); }
int RedisStore::idle_closes() const { return session_->idle_closes(); }
std::string RedisStore::primary() const { return session_->primary(); }
int RedisStore::failovers() const { return session_->failovers(); }
int RedisStore::late_replies_dropped() const { return session_->late_replies_dropped(); }

RedisReply RedisStore::command(const std::vector<std::string_view>& args, bool idempotent) {
  return std::move(session_->pipeline({args}, idempotent).front());
}

std::vector<std::string> RedisStore::client_names() const {
  RedisReply reply = session_->checked(std::move(session_->pipeline({{"CLIENT", "LIST", "TYPE", "normal"}}, true).front()),
                                       "CLIENT LIST");
  if (reply.type != RedisReply::Type::kString && reply.type != RedisReply::Type::kStatus) {
    throw InvalidArgument("redis at " + endpoint().display() + ": unexpected CLIENT LIST reply");
  }
  // One line per client, space-separated `field=value` pairs; a name has no spaces (SETNAME refuses them).
  std::vector<std::string> names;
  std::string_view rest = reply.str;
  while (!rest.empty()) {
    const std::size_t end = rest.find('\n');
    std::string_view line = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    const std::size_t at = line.starts_with("name=") ? 0 : line.find(" name=");
    if (at == std::string_view::npos) continue;
    std::string_view name = line.substr(at + (at == 0 ? 5 : 6));
    name = name.substr(0, name.find(' '));
    if (!name.empty()) names.emplace_back(name);
  }
  return names;
}

std::vector<RedisReply> RedisStore::pipeline(const std::vector<std::vector<std::string_view>>& commands,
                                             bool idempotent) {
  return session_->pipeline(commands, idempotent);
}

void RedisStore::set(std::string_view key, std::string_view value) {
  session_->checked(command({"SET", key, value}, true), "SET", key);
}

void RedisStore::set_with_ttl(std::string_view key, std::string_view value, Duration ttl) {
  session_->checked(command({"SET", key, value, "PX", ttl_ms(ttl, "set_with_ttl")}, true), "SET PX", key);
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
  const RedisReply refreshed = session_->checked(std::move(replies[0]), new_value ? "SET XX" : "PEXPIRE", key);
  Refresh result;
  result.alive = new_value ? refreshed.type == RedisReply::Type::kStatus : refreshed.integer == 1;
  if (!reads.empty()) result.values = string_values(session_->checked(std::move(replies[1]), "MGET"));
  return result;
}

std::optional<std::string> RedisStore::get(std::string_view key) {
  RedisReply reply = session_->checked(command({"GET", key}, true), "GET", key);
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
  return session_->checked(std::move(reply), "INCRBY", key).integer;
}

bool RedisStore::compare_and_set(std::string_view key, std::optional<std::string_view> expected,
                                 std::string_view desired) {
  RedisReply reply =
      scripts_->eval(compare_and_set_script(), {key, expected ? "1" : "0", expected.value_or(std::string_view()), desired},
                     1, false);
  return session_->checked(std::move(reply), "compare_and_set", key).integer == 1;
}

bool RedisStore::erase(std::string_view key) {
  return session_->checked(command({"DEL", key}, true), "DEL", key).integer > 0;
}

std::vector<std::string> RedisStore::keys(std::string_view prefix) {
  // SCAN, not KEYS: it never blocks the server for long. The whole scan is one idempotent unit;
  // a reconnect midway restarts a cursor that is only valid on the connection's server anyway.
  const std::string pattern = glob_escape(prefix) + "*";
  std::vector<std::string> result;
  std::string cursor = "0";
  do {
    RedisReply reply = session_->checked(command({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"}, true), "SCAN");
    if (reply.type != RedisReply::Type::kArray || reply.elements.size() != 2) {
      throw InvalidArgument("redis at " + endpoint().display() + ": unexpected SCAN reply");
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
    if (session_->checked(command(args, true), "EXISTS").integer == static_cast<long long>(unique.size())) return;
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
  return string_values(session_->checked(command(args, true), "MGET"));
}

std::vector<std::optional<Store::Duration>> RedisStore::remaining_ttl(const std::vector<std::string>& keys) {
  if (keys.empty()) return {};
  std::vector<std::vector<std::string_view>> commands;
  for (const auto& key : keys) commands.push_back({"PTTL", key});
  std::vector<RedisReply> replies = pipeline(commands, true);
  std::vector<std::optional<Duration>> ttls;
  for (std::size_t i = 0; i < replies.size(); ++i) {
    const RedisReply reply = session_->checked(std::move(replies[i]), "PTTL", keys[i]);
    // -2: no such key; -1: no TTL.
    ttls.push_back(reply.integer > 0 ? std::optional(Duration(reply.integer)) : std::nullopt);
  }
  return ttls;
}

std::map<std::string, std::string> RedisStore::hash_get_all(std::string_view key) {
  RedisReply reply = session_->checked(command({"HGETALL", key}, true), "HGETALL", key);
  std::map<std::string, std::string> fields;
  for (std::size_t i = 0; i + 1 < reply.elements.size(); i += 2) {
    fields.emplace(std::move(reply.elements[i].str), std::move(reply.elements[i + 1].str));
  }
  return fields;
}

std::vector<StreamEntry> RedisStore::stream_tail(std::string_view key, std::size_t count) {
  if (count == 0) return {};
  RedisReply reply =
      session_->checked(command({"XREVRANGE", key, "+", "-", "COUNT", std::to_string(count)}, true), "XREVRANGE", key);
  std::vector<StreamEntry> entries = stream_entries(reply.elements, endpoint(), "XREVRANGE", key);
  std::reverse(entries.begin(), entries.end());  // oldest first
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
  } else if (auto blocked = session_->blocking_command(args, block)) {
    reply = std::move(*blocked);
  } else {
    return {};  // stop_stream_reads() or interrupt_stream_reads()
  }
  if (reply.type == RedisReply::Type::kError && reply.str.find("Invalid stream ID") != std::string::npos) {
    throw InvalidArgument("stream_read: " + quote_value(after) + " is not a stream id (<ms>-<seq>)");
  }
  reply = session_->checked(std::move(reply), "XREAD", key);
  if (reply.type == RedisReply::Type::kNil) return {};  // nothing within `block`
  // [[key, [[id, [field, value, ...]], ...]]]
  if (reply.elements.size() != 1 || reply.elements[0].elements.size() != 2) {
    throw InvalidArgument("redis at " + endpoint().display() + ": unexpected XREAD reply for key " + quote_value(key));
  }
  return stream_entries(reply.elements[0].elements[1].elements, endpoint(), "XREAD", key);
}

void RedisStore::stop_stream_reads() { session_->stop_blocking(); }
void RedisStore::interrupt_stream_reads() { session_->interrupt_blocking(); }

CommitResult RedisStore::commit(const Transaction& transaction) {
  transaction.validate();
  std::deque<std::string> owned;
  const std::vector<std::string_view> keys_and_args = encode_commit(transaction, owned);
  RedisReply reply =
      session_->checked(scripts_->eval(commit_script(), keys_and_args, commit_key_count(transaction), false), "commit");
  return decode_commit(std::move(reply), transaction, keys_and_args, endpoint().display());
}

}  // namespace hdp::elastic
