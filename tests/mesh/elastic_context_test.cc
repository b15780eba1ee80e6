// The worker's rendezvous over a MemoryStore with real TCP connections on loopback: a generation's
// communicators (two channels) bootstrap from ElasticContext::bootstrap, and a bootstrap whose
// generation is superseded gives up at once. (In tests/mesh/: the communicators are hdp_mesh's.)
#include "elastic/elastic_context.h"

#include <gtest/gtest.h>

#include <future>
#include <tuple>
#include <thread>

#include "common/error.h"
#include "elastic/job_keys.h"
#include "elastic/memory_store.h"
#include "mesh/comm/communicator_factory.h"
#include "tests/elastic/worker_fixture.h"

namespace hdp::elastic {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class ElasticContextTest : public test::WorkerFixture {};

TEST_F(ElasticContextTest, EveryMemberConnectsToTwoIndependentCommunicators) {
  publish(1, {"a", "b"});
  // Each member connects the generation's "main" and "ckpt" channels, then uses both.
  auto member = [&](const std::string& node) {
    ElasticContext ctx = worker(node);
    Membership m = ctx.wait_for_next(0, 5s);
    const Bootstrap boot = ctx.bootstrap(m);
    EXPECT_EQ(boot.generation, 1);
    EXPECT_EQ(boot.advertise_address, "127.0.0.1");
    auto main = mesh::connect_communicator(boot, "main", 10s);
    auto ckpt = mesh::connect_communicator(boot, "ckpt", 10s);
    EXPECT_EQ(main->size(), 2);
    EXPECT_EQ(ckpt->rank(), m.rank);
    const std::int64_t sum = main->allreduce_sum(std::int64_t{m.rank + 1});
    const std::int64_t max = ckpt->allreduce_max(std::int64_t{m.rank + 10});
    return std::tuple(m.rank, sum, max);
  };
  auto b = std::async(std::launch::async, member, "b");
  const auto [rank_a, sum_a, max_a] = member("a");
  const auto [rank_b, sum_b, max_b] = b.get();
  EXPECT_EQ(rank_a, 0);
  EXPECT_EQ(rank_b, 1);
  EXPECT_EQ(sum_a, 3);
  EXPECT_EQ(sum_b, 3);
  EXPECT_EQ(max_a, 11);
  EXPECT_EQ(max_b, 11);
}

TEST_F(ElasticContextTest, ABootstrapWhoseGenerationIsSupersededGivesUpAtOnce) {
  publish(1, {"a", "b"});  // b died before it connected
  ElasticContext a = worker("a");
  Membership m = a.wait_for_next(0, 5s);
  std::thread leader([&] {
    std::this_thread::sleep_for(300ms);
    publish(2, {"a"});  // b's lease expired: the next generation is published
  });
  const auto start = Clock::now();
  EXPECT_THROW(mesh::connect_communicator(a.bootstrap(m), "main", 20s), PeerLost);
  const auto waited = Clock::now() - start;
  leader.join();
  // 300 ms until the new generation, then at most one 250 ms check slice and one 100 ms cache of
  // the generation number; 2 s leaves room for a loaded machine and is 10x below the timeout.
  EXPECT_GE(waited, 300ms);
  EXPECT_LT(waited, 2s);
}

TEST_F(ElasticContextTest, ABootstrapMissingAPeerTimesOutWhenNothingChanges) {
  publish(1, {"a", "b"});
  ElasticContext a = worker("a");
  Membership m = a.wait_for_next(0, 5s);
  const auto start = Clock::now();
  EXPECT_THROW(mesh::connect_communicator(a.bootstrap(m), "main", 600ms), TimeoutError);
  const auto waited = Clock::now() - start;
  EXPECT_GE(waited, 600ms);
  EXPECT_LT(waited, 3s);
}

}  // namespace
}  // namespace hdp::elastic
