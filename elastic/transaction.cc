#include "elastic/transaction.h"

#include "common/error.h"

namespace hdp::elastic {

Write Write::set(std::string key, std::string value, std::chrono::milliseconds ttl) {
  return Write{.op = Op::kSet, .key = std::move(key), .value = std::move(value), .ttl = ttl};
}

Write Write::erase(std::string key) { return Write{.op = Op::kErase, .key = std::move(key)}; }

Write Write::expire(std::string key, std::chrono::milliseconds ttl) {
  return Write{.op = Op::kExpire, .key = std::move(key), .ttl = ttl};
}

Write Write::hash_set(std::string key, Fields fields) {
  return Write{.op = Op::kHashSet, .key = std::move(key), .fields = std::move(fields)};
}

Write Write::stream_append(std::string key, Fields fields, std::size_t max_length) {
  return Write{.op = Op::kStreamAppend, .key = std::move(key), .fields = std::move(fields), .max_length = max_length};
}

Transaction& Transaction::require(std::string key, std::string value) {
  conditions.push_back({std::move(key), std::move(value)});
  return *this;
}

Transaction& Transaction::require_absent(std::string key) {
  conditions.push_back({std::move(key), std::nullopt});
  return *this;
}

Transaction& Transaction::add(Write write) {
  writes.push_back(std::move(write));
  return *this;
}

Transaction& Transaction::read(std::string key) {
  reads.push_back(std::move(key));
  return *this;
}

void Transaction::validate() const {
  for (const auto& write : writes) {
    switch (write.op) {
      case Write::Op::kSet:
        if (write.ttl.count() < 0) throw InvalidArgument("commit: negative ttl for key of set");
        break;
      case Write::Op::kExpire:
        if (write.ttl.count() <= 0) throw InvalidArgument("commit: expire needs a ttl > 0 ms");
        break;
      case Write::Op::kHashSet:
        if (write.fields.empty()) throw InvalidArgument("commit: hash_set without fields");
        break;
      case Write::Op::kStreamAppend:
        if (write.fields.empty()) throw InvalidArgument("commit: stream_append without fields");
        if (write.max_length == 0) throw InvalidArgument("commit: stream_append needs a max_length > 0");
        break;
      case Write::Op::kErase:
        break;
    }
  }
}

}  // namespace hdp::elastic
