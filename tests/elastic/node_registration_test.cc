// A node's claim and lease on a MemoryStore: incarnations never refresh, rewrite or remove each
// other's lease, and a node id held by a live agent is refused.
#include "elastic/node_registration.h"

#include <gtest/gtest.h>

#include <thread>

#include "common/error.h"
#include "elastic/job_keys.h"
#include "elastic/memory_store.h"
#include "tests/elastic/forwarding_store.h"

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

// Issue 13, defect 2: the claim and lease were committed, then the announcement failed (`joins` of
// another type); the next call must complete that same incarnation — not start another one, which
// found its own predecessor's live lease on the node id and waited, then failed as NodeIdInUse.
TEST_F(NodeRegistrationTest, ARegistrationThatFailedAfterItsClaimIsCompletedByTheNextCall) {
  ASSERT_TRUE(store_->commit(Transaction{}.add(Write::hash_set(keys::kJoinCount, {{"garbage", "1"}}))));
  NodeRegistration node(store_, lease_of("a"), 60s);
  EXPECT_THROW(node.register_new_incarnation(0ms), InvalidArgument);
  EXPECT_FALSE(node.registered());
  const std::string incarnation = node.lease().incarnation;
  ASSERT_EQ(store_->get(keys::node("a")), incarnation);  // the claim and lease went through
  ASSERT_TRUE(stored_lease(node).has_value());

  store_->erase(keys::kJoinCount);  // the garbage is gone
  ASSERT_NO_THROW(node.register_new_incarnation(0ms));
  EXPECT_TRUE(node.registered());
  EXPECT_EQ(node.lease().incarnation, incarnation);
  EXPECT_EQ(store_->get(keys::node("a")), incarnation);
  EXPECT_EQ(store_->get(keys::kJoinCount), "1");
  ASSERT_TRUE(store_->get(keys::join(1)).has_value());
  EXPECT_NE(store_->get(keys::join(1))->find(incarnation), std::string::npos);
  EXPECT_TRUE(node.heartbeat({0, 1}, 0).alive);

  // After a completed registration, the next one is a new incarnation again.
  node.deregister();
  node.register_new_incarnation(0ms);
  EXPECT_NE(node.lease().incarnation, incarnation);
}

// A store that fails the first commit after an add() once, as a Redis outage between drawing a join
// number and writing the announcement would.
class FlakyStore final : public test::ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  bool fail_commit_after_add = false;

  std::int64_t add(std::string_view k, std::int64_t d) override {
    added_ = true;
    return ForwardingStore::add(k, d);
  }
  CommitResult commit(const Transaction& t) override {
    if (fail_commit_after_add && added_) {
      fail_commit_after_add = false;
      throw StoreUnavailable("injected outage");
    }
    return ForwardingStore::commit(t);
  }

 private:
  bool added_ = false;
};

// The outage hit between drawing join number 1 and writing its announcement: the retry writes
// announcement 1 (no hole for the leader to wait 10 s on) for the same incarnation.
TEST_F(NodeRegistrationTest, AnAnnouncementLostToAnOutageIsWrittenUnderTheSameJoinNumber) {
  auto flaky = std::make_shared<FlakyStore>(store_);
  flaky->fail_commit_after_add = true;
  NodeRegistration node(flaky, lease_of("a"), 60s);
  EXPECT_THROW(node.register_new_incarnation(0ms), StoreUnavailable);
  EXPECT_FALSE(node.registered());
  const std::string incarnation = node.lease().incarnation;
  EXPECT_EQ(store_->get(keys::join(1)), std::nullopt);

  ASSERT_NO_THROW(node.register_new_incarnation(0ms));
  EXPECT_TRUE(node.registered());
  EXPECT_EQ(node.lease().incarnation, incarnation);
  EXPECT_EQ(store_->get(keys::kJoinCount), "1");
  ASSERT_TRUE(store_->get(keys::join(1)).has_value());
  EXPECT_NE(store_->get(keys::join(1))->find(incarnation), std::string::npos);
}

// Issue 13, defect 1: announce() lets a live incarnation that is not a member join again.
TEST_F(NodeRegistrationTest, AnnounceAddsAnotherAnnouncementOfTheSameIncarnation) {
  NodeRegistration node(store_, lease_of("a"), 60s);
  node.register_new_incarnation(0ms);
  node.announce();
  EXPECT_EQ(store_->get(keys::kJoinCount), "2");
  EXPECT_EQ(store_->get(keys::join(1)), store_->get(keys::join(2)));
}

// A lease value someone overwrote is repaired by a rewriting heartbeat, which still never revives a
// lease that is gone.
TEST_F(NodeRegistrationTest, ARewritingHeartbeatRepairsTheLeaseButNeverRevivesIt) {
  NodeRegistration node(store_, lease_of("a"), 60s);
  node.register_new_incarnation(0ms);
  const std::string key = keys::lease("a", node.lease().incarnation);
  store_->set_with_ttl(key, "garbage", 60s);
  ASSERT_TRUE(node.heartbeat({0, 1}, 0).alive);
  EXPECT_EQ(store_->get(key), "garbage");  // a plain heartbeat only extends the TTL
  ASSERT_TRUE(node.heartbeat({0, 1}, 0, /*rewrite=*/true).alive);
  ASSERT_TRUE(stored_lease(node).has_value());
  store_->erase(key);
  EXPECT_FALSE(node.heartbeat({0, 1}, 0, /*rewrite=*/true).alive);
  EXPECT_EQ(store_->get(key), std::nullopt);
}

// Issue 13, defect 14: after the store lost its data (claim and lease gone) the same incarnation is
// re-established, its lease remembering the generations seen; while the claim is still there (the
// lease expired while the store kept its data) it is an eviction and nothing changes.
TEST_F(NodeRegistrationTest, AfterTheStoreLostItsDataTheSameIncarnationIsReestablished) {
  NodeRegistration node(store_, lease_of("a"), 60s);
  node.register_new_incarnation(0ms);
  const std::string incarnation = node.lease().incarnation;
  store_->clear();
  EXPECT_FALSE(node.heartbeat({0, 1}, 7).alive);
  ASSERT_TRUE(node.reestablish(7));
  EXPECT_EQ(node.lease().incarnation, incarnation);
  EXPECT_EQ(store_->get(keys::node("a")), incarnation);
  ASSERT_TRUE(stored_lease(node).has_value());
  EXPECT_EQ(stored_lease(node)->last_generation, 7);
  EXPECT_TRUE(node.heartbeat({0, 1}, 7).alive);
  const auto events = store_->stream_tail(keys::kEvents, 1);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].fields.at(0), (std::pair<std::string, std::string>("type", "restored")));
}

TEST_F(NodeRegistrationTest, ALeaseThatExpiredWhileTheStoreKeptItsDataIsNotReestablished) {
  NodeRegistration node(store_, lease_of("a"), 60s);
  node.register_new_incarnation(0ms);
  const std::string incarnation = node.lease().incarnation;
  ASSERT_TRUE(store_->erase(keys::lease("a", incarnation)));  // expired: the claim is still there
  EXPECT_FALSE(node.reestablish(3));
  EXPECT_EQ(stored_lease(node), std::nullopt);
  EXPECT_EQ(store_->get(keys::node("a")), incarnation);

  // Nor when another agent has taken the node id meanwhile.
  store_->set(keys::node("a"), "0123456789abcdef");
  EXPECT_FALSE(node.reestablish(3));
  EXPECT_EQ(store_->get(keys::node("a")), "0123456789abcdef");
  EXPECT_EQ(stored_lease(node), std::nullopt);
}

}  // namespace
}  // namespace hdp::elastic
