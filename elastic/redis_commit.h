// File: elastic/redis_commit.h
//
// The Lua scripts of RedisStore and how they are run and spoken to. Private to the Redis layer
// (elastic/redis_store.cc).
//  - compare_and_set_script(): the atomic compare-and-set of Store::compare_and_set(); KEYS[1] the
//    key, ARGV: "1" and the expected value, or "0" and "" when the key must be absent; then the
//    desired value. The swap keeps the key's expiry (KEEPTTL). Replies 1 when it swapped, else 0.
//  - commit_script(): Store::commit(), all or nothing: every condition and the type of every key
//    written are checked before the first write (Redis does not roll a script back when a command
//    fails midway). encode_commit() gives its KEYS and ARGV, decode_commit() reads its reply.
//  - RedisScripts runs a script by its SHA (EVALSHA), loading it on a NOSCRIPT reply: a restarted
//    server has an empty script cache, and NOSCRIPT means the script did not run, so running it
//    again is safe.
//
// Example:
//   std::deque<std::string> owned;
//   const auto keys_and_args = encode_commit(transaction, owned);
//   RedisReply reply = scripts.eval(commit_script(), keys_and_args, commit_key_count(transaction), false);
//   CommitResult result =
//       decode_commit(session.checked(std::move(reply), "commit"), transaction, keys_and_args, where);
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "elastic/redis_connection.h"
#include "elastic/store.h"
#include "elastic/transaction.h"

namespace hdp::elastic {

class RedisSession;

std::string_view compare_and_set_script();
std::string_view commit_script();

// The commit script's KEYS then ARGV for `transaction` (validated before). KEYS: the condition
// keys, one key per write, then the read keys (commit_key_count() of them). ARGV[1]: the number of
// conditions, ARGV[2]: the number of reads; then per condition '1' + value, or '0' + '' for
// "absent"; then per write its op and arguments: set value ttl_ms | del | pexpire ttl_ms |
// hset n f1 v1 .. | xadd maxlen n f1 v1 ... The views are into `transaction` and into `owned`,
// which holds the numbers formatted here (a deque: growing it never moves its strings); both must
// outlive them.
std::vector<std::string_view> encode_commit(const Transaction& transaction, std::deque<std::string>& owned);
std::size_t commit_key_count(const Transaction& transaction);

// The commit script's reply (not an error reply: RedisSession::checked() first) for `transaction`,
// sent as `keys_and_args` (encode_commit()). The script replies {applied (0/1), read values...}, a
// missing read (or one of another type, as MGET reads it) as nil; or, when a condition or write
// key holds the wrong type, {-1, index of that key in KEYS, its type, the type needed}, so that the
// error names the key (a Redis error text cannot carry arbitrary key bytes): thrown as WrongType
// saying nothing was written. Any other reply: InvalidArgument. `where` names the server.
CommitResult decode_commit(RedisReply reply, const Transaction& transaction,
                           const std::vector<std::string_view>& keys_and_args, std::string_view where);

// Runs the scripts of one RedisStore over its session; thread-safe (the SHAs are shared).
class RedisScripts {
 public:
  explicit RedisScripts(RedisSession& session) : session_(session) {}

  // EVALSHA of `script` with `keys_and_args` (the first `key_count` are KEYS), under the session's
  // failure policy (`idempotent`: whether it may run twice); an error reply is returned, not thrown.
  RedisReply eval(std::string_view script, const std::vector<std::string_view>& keys_and_args, std::size_t key_count,
                  bool idempotent);

 private:
  RedisSession& session_;
  std::mutex mutex_;
  std::map<std::string, std::string, std::less<>> shas_;  // script text -> SHA1; guarded by mutex_
};

}  // namespace hdp::elastic
