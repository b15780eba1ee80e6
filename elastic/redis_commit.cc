// File: elastic/redis_commit.cc
//
// The Lua scripts of RedisStore, the encoding of a Transaction as the commit script's KEYS and
// ARGV, the decoding of its reply, and EVALSHA with its NOSCRIPT fallback (elastic/redis_commit.h).
#include "elastic/redis_commit.h"

#include "common/text.h"
#include "elastic/redis_session.h"

namespace hdp::elastic {
namespace {

// Store::compare_and_set(): KEYS and ARGV as elastic/redis_commit.h says.
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

// Store::commit(): KEYS and ARGV as encode_commit() writes them, the reply as decode_commit()
// reads it (elastic/redis_commit.h). Every type is checked before the first write.
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

}  // namespace

std::string_view compare_and_set_script() { return kCompareAndSetScript; }
std::string_view commit_script() { return kCommitScript; }

std::size_t commit_key_count(const Transaction& transaction) {
  return transaction.conditions.size() + transaction.writes.size() + transaction.reads.size();
}

std::vector<std::string_view> encode_commit(const Transaction& transaction, std::deque<std::string>& owned) {
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
  keys.insert(keys.end(), args.begin(), args.end());
  return keys;
}

CommitResult decode_commit(RedisReply reply, const Transaction& transaction,
                           const std::vector<std::string_view>& keys_and_args, std::string_view where) {
  const std::size_t key_count = commit_key_count(transaction);
  if (reply.type == RedisReply::Type::kArray && reply.elements.size() == 4 && reply.elements[0].integer == -1) {
    const auto index = reply.elements[1].integer;  // 1-based, into KEYS
    if (index >= 1 && static_cast<std::size_t>(index) <= key_count) {
      const std::string key(keys_and_args[static_cast<std::size_t>(index - 1)]);
      throw WrongType(key, "redis at " + std::string(where) + ": commit: key " + quote_value(key) + " holds a " +
                               reply.elements[2].str + ", not a " + reply.elements[3].str + "; nothing was written");
    }
  }
  if (reply.type != RedisReply::Type::kArray || reply.elements.size() != 1 + transaction.reads.size()) {
    throw InvalidArgument("redis at " + std::string(where) + ": unexpected commit reply");
  }
  CommitResult result;
  result.applied = reply.elements[0].integer == 1;
  reply.elements.erase(reply.elements.begin());
  result.values = string_values(std::move(reply));
  return result;
}

RedisReply RedisScripts::eval(std::string_view script, const std::vector<std::string_view>& keys_and_args,
                              std::size_t key_count, bool idempotent) {
  std::string sha;
  {
    std::lock_guard lock(mutex_);
    if (auto it = shas_.find(script); it != shas_.end()) sha = it->second;
  }
  if (sha.empty()) {
    sha = session_.checked(std::move(session_.pipeline({{"SCRIPT", "LOAD", script}}, true).front()), "SCRIPT LOAD").str;
    std::lock_guard lock(mutex_);
    shas_.emplace(std::string(script), sha);
  }
  const std::string count = std::to_string(key_count);
  std::vector<std::string_view> args{"EVALSHA", sha, count};
  args.insert(args.end(), keys_and_args.begin(), keys_and_args.end());
  RedisReply reply = std::move(session_.pipeline({args}, idempotent).front());
  if (reply.type == RedisReply::Type::kError && reply.str.starts_with("NOSCRIPT")) {
    args[0] = "EVAL";
    args[1] = script;
    reply = std::move(session_.pipeline({args}, idempotent).front());
  }
  return reply;
}

}  // namespace hdp::elastic
