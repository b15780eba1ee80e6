// RedisStore and PrefixStore(RedisStore) against a real redis-server: the conformance suite.
// Fault behaviour is in redis_store_fault_test.cc.
#include "tests/elastic/store_conformance.h"

namespace hdp::test {
namespace {

INSTANTIATE_TEST_SUITE_P(Redis, StoreConformance, ::testing::Values(redis_backend(), prefixed_redis_backend()),
                         backend_name);

}  // namespace
}  // namespace hdp::test
