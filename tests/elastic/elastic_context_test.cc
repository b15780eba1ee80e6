// The worker's rendezvous over a MemoryStore with real Gloo TCP pairs on loopback: a generation's
// communicator bootstraps, and a bootstrap whose generation is superseded gives up at once.
#include "elastic/elastic_context.h"

#include <gloo/rendezvous/context.h>
#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "common/error.h"
#include "elastic/job_keys.h"
#include "elastic/memory_store.h"

namespace hdp::elastic {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class ElasticContextTest : public ::testing::Test {
 protected:
  // Publishes generation g with one slot on each of `nodes`, as the leader would.
  void publish(std::int64_t g, const std::vector<std::string>& nodes) {
    Generation generation{.number = g};
    for (const auto& node : nodes) generation.members.push_back({node, "inc-" + node, "127.0.0.1", {0}, 0});
    generation.assign_ranks();
    store_->set(keys::generation(g), encode(generation));
    store_->set(keys::kGeneration, std::to_string(g));
  }
  ElasticContext worker(const std::string& node) { return ElasticContext(store_, {"job", node, "inc-" + node, 0}); }

  std::shared_ptr<MemoryStore> store_ = std::make_shared<MemoryStore>();
};

TEST_F(ElasticContextTest, EveryMemberConnectsToOneCommunicator) {
  publish(1, {"a", "b"});
  // Each side keeps its communicator until both have connected: one that returns first and drops
  // its pairs could close them while the other is still finishing its handshake.
  auto connect = [&](const std::string& node) {
    ElasticContext ctx = worker(node);
    Membership m = ctx.wait_for_next(0, 5s);
    return std::pair(m.rank, ctx.connect(m, 10s));
  };
  auto b = std::async(std::launch::async, connect, "b");
  const auto [rank_a, comm_a] = connect("a");
  const auto [rank_b, comm_b] = b.get();
  EXPECT_EQ(rank_a, 0);
  EXPECT_EQ(rank_b, 1);
  EXPECT_EQ(comm_a->size, 2);
  EXPECT_EQ(comm_b->size, 2);
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
  EXPECT_THROW(a.connect(m, 20s), PeerLost);
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
  EXPECT_THROW(a.connect(m, 600ms), TimeoutError);
  const auto waited = Clock::now() - start;
  EXPECT_GE(waited, 600ms);
  EXPECT_LT(waited, 3s);
}

}  // namespace
}  // namespace hdp::elastic
