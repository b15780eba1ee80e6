// A node's claim and lease on a MemoryStore: incarnations never refresh, rewrite or remove each
// other's lease, and a node id held by a live agent is refused.
#include "elastic/node_registration.h"

#include <gtest/gtest.h>

#include <thread>

#include "common/error.h"
#include "elastic/job_keys.h"
#include "elastic/memory_store.h"

namespace hdp::elastic {
namespace {

using namespace std::chrono_literals;

NodeLease lease_of(const std::string& node) {
  return NodeLease{.node = node, .host = "127.0.0.1", .pid = 1, .version = "test", .slots = 2, .healthy = {0, 1}};
}

class NodeRegistrationTest : public ::testing::Test {
 protected:
  std::optional<NodeLease> stored_lease(const NodeRegistration& registration) {
    auto text = store_->get(keys::lease(registration.lease().node, registration.lease().incarnation));
    if (!text) return std::nullopt;
    return decode_node_lease(*text, "lease");
  }

  std::shared_ptr<MemoryStore> store_ = std::make_shared<MemoryStore>();
};

TEST_F(NodeRegistrationTest, HeartbeatKeepsTheLeaseAliveAndRewritesItOnlyWhenItChanged) {
  NodeRegistration node(store_, lease_of("a"), 300ms);
  node.register_new_incarnation(0ms);
  store_->set(keys::kLeader, "a/x");
  for (int i = 0; i < 5; ++i) {
    std::this_thread::sleep_for(100ms);
    auto beat = node.heartbeat({0, 1}, 0);
    ASSERT_TRUE(beat.alive) << "heartbeat " << i;
    EXPECT_EQ(beat.leader, "a/x");
    EXPECT_EQ(beat.generation, std::nullopt);
  }
  ASSERT_TRUE(node.heartbeat({1}, 7).alive);  // slot 0's worker died; generation 7 seen
  EXPECT_EQ(stored_lease(node)->healthy, std::vector<int>{1});
  EXPECT_EQ(stored_lease(node)->last_generation, 7);
  EXPECT_EQ(node.lease().healthy, std::vector<int>{1});
}

TEST_F(NodeRegistrationTest, AnEvictedIncarnationNeverTouchesItsSuccessor) {
  NodeRegistration old_agent(store_, lease_of("a"), 200ms);
  old_agent.register_new_incarnation(0ms);
  std::this_thread::sleep_for(350ms);  // paused past its lease: the lease expired, the claim stayed
  NodeRegistration new_agent(store_, lease_of("a"), 60s);
  new_agent.register_new_incarnation(0ms);  // no wait: the holder's lease is gone
  ASSERT_NE(new_agent.lease().incarnation, old_agent.lease().incarnation);

  // The paused agent resumes: its heartbeat (a rewrite, too) finds its own lease gone.
  EXPECT_FALSE(old_agent.heartbeat({0}, 9).alive);
  EXPECT_FALSE(old_agent.heartbeat({0, 1}, 0).alive);
  EXPECT_EQ(store_->get(keys::lease("a", old_agent.lease().incarnation)), std::nullopt);
  EXPECT_EQ(stored_lease(new_agent)->healthy, (std::vector<int>{0, 1}));
  EXPECT_EQ(stored_lease(new_agent)->last_generation, 0);
  // Its deregistration removes nothing of the successor's.
  old_agent.deregister();
  EXPECT_EQ(store_->get(keys::node("a")), new_agent.lease().incarnation);
  EXPECT_TRUE(stored_lease(new_agent).has_value());
  EXPECT_TRUE(new_agent.heartbeat({0, 1}, 0).alive);
}

TEST_F(NodeRegistrationTest, ANodeIdHeldByALiveAgentIsRefusedAfterTheWait) {
  NodeRegistration first(store_, lease_of("a"), 60s);
  first.register_new_incarnation(0ms);
  NodeRegistration second(store_, lease_of("a"), 60s);
  const auto start = std::chrono::steady_clock::now();
  try {
    second.register_new_incarnation(300ms);
    FAIL() << "two live agents registered one node id";
  } catch (const NodeIdInUse& e) {
    // Its own type, not InvalidArgument (a usage error, exit 2): `hdp agent` exits 1 for it, which
    // systemd and Slurm retry (issue 13, defect 12; tests/cli/control_plane_cli_test.cc runs it).
    EXPECT_EQ(dynamic_cast<const InvalidArgument*>(&e), nullptr);
    EXPECT_NE(std::string(e.what()).find("node id 'a' is held by another live agent"), std::string::npos) << e.what();
  }
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, 300ms);
  EXPECT_LT(waited, 1s);
  EXPECT_TRUE(first.heartbeat({0, 1}, 0).alive);  // the holder is untouched
}

TEST_F(NodeRegistrationTest, DeregisterFreesTheNodeIdAtOnce) {
  NodeRegistration first(store_, lease_of("a"), 60s);
  first.register_new_incarnation(0ms);
  first.deregister();
  EXPECT_EQ(store_->get(keys::node("a")), std::nullopt);
  EXPECT_FALSE(first.heartbeat({0, 1}, 0).alive);
  NodeRegistration second(store_, lease_of("a"), 60s);
  EXPECT_NO_THROW(second.register_new_incarnation(0ms));
}

TEST_F(NodeRegistrationTest, EachRegistrationAnnouncesAJoin) {
  NodeRegistration node(store_, lease_of("a"), 60s);
  node.register_new_incarnation(0ms);
  const std::string first = node.lease().incarnation;
  node.deregister();
  node.register_new_incarnation(0ms);
  EXPECT_EQ(store_->get(keys::kJoinCount), "2");
  EXPECT_NE(store_->get(keys::join(1))->find(first), std::string::npos);
  EXPECT_NE(store_->get(keys::join(2))->find(node.lease().incarnation), std::string::npos);
}

}  // namespace
}  // namespace hdp::elastic
