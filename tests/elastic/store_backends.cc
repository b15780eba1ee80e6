#include "tests/elastic/store_backends.h"

#include "elastic/memory_store.h"
#include "elastic/prefix_store.h"
#include "elastic/redis_store.h"
#include "tests/support/redis_server.h"

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

}  // namespace

BackendParam memory_backend() {
  return {"Memory", [] { return std::make_unique<MemoryBackend>(); }};
}

BackendParam redis_backend() {
  return {"Redis", [] { return std::make_unique<RedisBackend>(""); }};
}

BackendParam prefixed_redis_backend() {
  // A prefix with glob and protocol characters: scoping must stay literal.
  return {"PrefixRedis", [] { return std::make_unique<RedisBackend>("hdp:job*[1]\r\n:"); }};
}

}  // namespace hdp::test
