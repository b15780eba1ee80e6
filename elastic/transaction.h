// File: elastic/transaction.h
//
// The argument of Store::commit(): conditions on string keys, and the writes to apply atomically
// when all of them hold. Writes are built with the named constructors.
//
// Example (publish generation 8 only if the current one is still 7 and we are still the leader):
//   Transaction txn;
//   txn.require("gen", "7").require("leader", my_id);
//   txn.add(Write::set("gen", "8")).add(Write::set("gen:8", members_json));
//   txn.add(Write::hash_set("state", {{"generation", "8"}}));
//   bool published = store.commit(txn);
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace hdp::elastic {

using Fields = std::vector<std::pair<std::string, std::string>>;

struct StreamEntry {
  std::string id;  // "<milliseconds>-<sequence>", increasing
  Fields fields;
};

struct Condition {
  std::string key;
  std::optional<std::string> value;  // nullopt: the key must be absent
};

struct Write {
  enum class Op { kSet, kErase, kExpire, kHashSet, kStreamAppend };

  Op op = Op::kSet;
  std::string key;
  std::string value;                  // kSet
  std::chrono::milliseconds ttl{0};   // kSet (0: no TTL), kExpire (> 0)
  Fields fields;                      // kHashSet, kStreamAppend
  std::size_t max_length = 0;         // kStreamAppend: keep exactly this many newest entries

  static Write set(std::string key, std::string value, std::chrono::milliseconds ttl = {});
  static Write erase(std::string key);
  static Write expire(std::string key, std::chrono::milliseconds ttl);
  static Write hash_set(std::string key, Fields fields);
  static Write stream_append(std::string key, Fields fields, std::size_t max_length);
};

struct Transaction {
  std::vector<Condition> conditions;
  std::vector<Write> writes;
  std::vector<std::string> reads;  // string keys read after the writes, in the same atomic step

  Transaction& require(std::string key, std::string value);
  Transaction& require_absent(std::string key);
  Transaction& add(Write write);
  Transaction& read(std::string key);
  // Throws InvalidArgument for a write that cannot be applied (TTL <= 0 on expire, no fields,
  // a stream without a length cap), naming the key.
  void validate() const;
};

// What Store::commit() returns: whether the writes were applied, and the values of the
// transaction's reads (taken whether or not the conditions held; missing keys are nullopt).
// Converts to bool (applied), so `if (store.commit(txn))` reads naturally.
struct CommitResult {
  bool applied = false;
  std::vector<std::optional<std::string>> values;

  operator bool() const { return applied; }  // NOLINT(google-explicit-constructor): see above
};

}  // namespace hdp::elastic
