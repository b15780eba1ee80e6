// File: tests/elastic/store_backends.h
//
// The Store implementations the conformance suite runs against. A backend hands out clients that
// share one data set: for MemoryStore the same object, for Redis a new connection each time (so
// that races between threads are real races between connections).
#pragma once

#include <functional>
#include <memory>
#include <ostream>
#include <string>

#include "elastic/store.h"

namespace hdp::test {

class StoreBackend {
 public:
  virtual ~StoreBackend() = default;
  virtual std::shared_ptr<elastic::Store> client() = 0;
};

struct BackendParam {
  std::string name;
  std::function<std::unique_ptr<StoreBackend>()> make;
};

// Names the backend in test listings instead of dumping the struct's bytes.
inline void PrintTo(const BackendParam& param, std::ostream* out) { *out << param.name; }

BackendParam memory_backend();
BackendParam redis_backend();
BackendParam prefixed_redis_backend();
// RedisStore through Redis Sentinel (a redis+sentinel:// endpoint: one primary, one sentinel), so
// that every call runs over a connection opened by resolving the primary (tests/elastic/sentinel_test.cc).
BackendParam sentinel_redis_backend();

}  // namespace hdp::test
