// File: elastic/store.h
//
// The key-value Store that rendezvous, membership and job state are built on (modelled on c10d's
// Store). The semantics below hold for every implementation and are pinned down by one conformance
// suite (tests/elastic/store_conformance_test.cc):
//
//  - Keys and values are arbitrary bytes (spaces, newlines, '*', NUL) up to at least 64 MiB.
//  - get() of a missing key returns nullopt; it never blocks (use wait() to block).
//  - set() overwrites and removes any TTL; set_with_ttl() overwrites and sets one.
//  - add() treats a missing key as 0, stores the sum as a decimal string, keeps an existing TTL,
//    and throws InvalidArgument when the stored value is not a 64-bit integer.
//  - compare_and_set(key, expected, desired) is atomic: with `expected` == nullopt it succeeds only
//    when the key is absent; it keeps an existing TTL.
//  - keys(prefix) lists the live keys starting with `prefix`, sorted bytewise.
//  - wait() blocks until every key exists, or throws TimeoutError after `timeout`.
//  - An expired key is indistinguishable from one never written.
//  - remaining_ttl() gives each key's time to live, nullopt for a key that is missing or has none.
//  - commit() is the one atomic multi-key primitive (etcd's Txn, a Lua script on Redis): if every
//    condition holds, every write is applied, all at once; otherwise nothing is. Fencing by
//    generation, leader leases and generation publication are all commit()s. Conditions compare
//    string keys only; hash and stream keys are written by commit() and read by hash_get_all(),
//    stream_tail() and stream_read().
//  - stream_read() is the one call that may wait for a write by another client (as wait() does):
//    it returns the entries after a given id, waiting up to `block` for one to be appended;
//    interrupt_stream_reads() ends the one in progress early, stop_stream_reads() every one.
//
// Every call may block (network I/O for RedisStore). Implementations are safe to call from many
// threads at once. Tier-1 failures (unreachable store) throw StoreUnavailable. A key that holds
// another kind of value than a call needs (a hash where a string is read, a string where a hash
// is written) throws WrongType, naming the key (multi_get and a commit's reads read it as missing,
// as Redis's MGET does); a commit that throws has written nothing.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"
#include "elastic/transaction.h"

namespace hdp::elastic {

// A key holds another kind of value than the operation needs. key() is the key as the store that
// threw it names it (a PrefixStore gives its callers their own, unprefixed, key).
class WrongType : public InvalidArgument {
 public:
  WrongType(std::string key, const std::string& message) : InvalidArgument(message), key_(std::move(key)) {}
  const std::string& key() const { return key_; }

 private:
  std::string key_;
};

// What Store::refresh_ttl() returns: whether the key was live (and so refreshed), and the values
// of the reads (missing keys are nullopt).
struct Refresh {
  bool alive = false;
  std::vector<std::optional<std::string>> values;
};

class Store {
 public:
  using Duration = std::chrono::milliseconds;

  virtual ~Store() = default;

  virtual void set(std::string_view key, std::string_view value) = 0;
  virtual void set_with_ttl(std::string_view key, std::string_view value, Duration ttl) = 0;
  // A lease's heartbeat, in one round trip and without a script (at 1,536 agents this is the whole
  // steady-state load of the store): extends a live key's TTL to `ttl`, first replacing its value
  // with `new_value` when one is given, then reads the string keys `reads`. A key that is missing
  // (expired) stays missing: `alive` is false. The reads are not atomic with the refresh.
  virtual Refresh refresh_ttl(std::string_view key, Duration ttl, std::optional<std::string_view> new_value,
                              const std::vector<std::string>& reads) = 0;
  virtual std::optional<std::string> get(std::string_view key) = 0;
  virtual std::int64_t add(std::string_view key, std::int64_t delta) = 0;
  virtual bool compare_and_set(std::string_view key, std::optional<std::string_view> expected,
                               std::string_view desired) = 0;
  // Returns true when the key existed.
  virtual bool erase(std::string_view key) = 0;
  virtual std::vector<std::string> keys(std::string_view prefix) = 0;
  virtual void wait(const std::vector<std::string>& keys, Duration timeout) = 0;

  // One round trip for many keys; a missing key reads as nullopt.
  virtual std::vector<std::optional<std::string>> multi_get(const std::vector<std::string>& keys) = 0;
  // One round trip for many keys: each key's remaining time to live (> 0), nullopt when the key is
  // missing or has no TTL. Lease ages for people (`hdp status`, the dashboard); nothing decides
  // from it.
  virtual std::vector<std::optional<Duration>> remaining_ttl(const std::vector<std::string>& keys) = 0;
  // All fields of a hash written by Write::hash_set; empty when the key is missing.
  virtual std::map<std::string, std::string> hash_get_all(std::string_view key) = 0;
  // The newest `count` entries of a stream written by Write::stream_append, oldest first.
  virtual std::vector<StreamEntry> stream_tail(std::string_view key, std::size_t count) = 0;
  // The entries of the stream `key` whose ids are greater than `after` ("<ms>-<seq>", or "0" for
  // the whole stream), oldest first, at most `count` (>= 1). When there are none it waits up to
  // `block` for one to be appended (0: returns at once); a missing key reads, and is waited on, as
  // an empty stream. How an agent learns of a new generation without polling (membership_agent.h).
  // Throws InvalidArgument for an `after` that is not an id.
  virtual std::vector<StreamEntry> stream_read(std::string_view key, std::string_view after, std::size_t count,
                                               Duration block) = 0;
  // Makes every stream_read() in progress, and every later one, return at once with nothing: how
  // an owner stops a thread blocked in one before it shuts down. Every other call is unaffected.
  virtual void stop_stream_reads() = 0;
  // Makes the stream_read() in progress return at once with nothing, or, when none is, the next
  // one to start; the reads after it block as usual. How a store's one connection, held by a
  // blocked read, is freed for a call that cannot wait (an agent whose worker saw its generation
  // break): a read about to start is stopped as surely as one under way. Safe from any thread;
  // may take a round trip. The store's connections stay as they are (a Redis store's stays open,
  // and in the server's client list, throughout).
  virtual void interrupt_stream_reads() = 0;
  // Atomically: if every condition holds, apply every write; else change nothing. Then read the
  // transaction's read keys (one round trip for a lease refresh and the reads that go with it).
  virtual CommitResult commit(const Transaction& transaction) = 0;
};

}  // namespace hdp::elastic
