#include "tests/elastic/store_backends.h"

#include "elastic/memory_store.h"
#include "elastic/prefix_store.h"
#include "elastic/redis_store.h"
#include "tests/support/redis_server.h"
#include "tests/support/sentinel_cluster.h"

namespace hdp::test {
namespace {

class MemoryBackend final : public StoreBackend {
 public:
  std::shared_ptr<elastic::Store> client() override { return store_; }

 private:
  std::shared_ptr<elastic::MemoryStore> store_ = std::make_shared<elastic::MemoryStore>();
};

class RedisBackend final : public StoreBackend {
 public:
  explicit RedisBackend(std::string prefix) : prefix_(std::move(prefix)) {}
  std::shared_ptr<elastic::Store> client() override {
    auto store = std::make_shared<elastic::RedisStore>(elastic::parse_redis_url(server_.url()));
    if (prefix_.empty()) return store;
    return std::make_shared<elastic::PrefixStore>(store, prefix_);
  }

 private:
  RedisServer server_;
  std::string prefix_;
};

class SentinelRedisBackend final : public StoreBackend {
 public:
  std::shared_ptr<elastic::Store> client() override {
    return std::make_shared<elastic::RedisStore>(cluster_.endpoint());
  }

 private:
  // No replica and one sentinel: the suite checks the Store's semantics through a resolved
  // primary, not failovers (sentinel_test.cc does), and starts one deployment per case.
  SentinelCluster cluster_{{.replicas = 0, .sentinels = 1, .quorum = 1}};
};

}  // namespace

BackendParam memory_backend() {
  return {"Memory", [] { return std::make_unique<MemoryBackend>(); }};
}

BackendParam redis_backend() {
  return {"Redis", [] { return std::make_unique<RedisBackend>(""); }};
}

BackendParam sentinel_redis_backend() {
  return {"SentinelRedis", [] { return std::make_unique<SentinelRedisBackend>(); }};
}

BackendParam prefixed_redis_backend() {
  // A prefix with glob and protocol characters: scoping must stay literal.
  return {"PrefixRedis", [] { return std::make_unique<RedisBackend>("hdp:job*[1]\r\n:"); }};
}

}  // namespace hdp::test
