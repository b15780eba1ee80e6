// The store's trouble is not a node's fault (docs/architecture.md, "The store's bad days"): the
// leader's rule (MembershipController with a StoreTroubleRule) and the agent's
// (MembershipAgent::heartbeat finding its lease gone), on a MemoryStore where erasing a lease
// stands in for a lease that ran out during a stall, and writing an older `gen` for a rollback.
//   - the leader: most members without a lease at once holds judgement for the rule's hold, and
//     those still gone after it are dropped; a single lost member is dropped at once; a hold asked
//     for by the agent (hold_judgement) keeps an expired member until then; a tick whose reads are
//     slow holds judgement; a generation that went back below the newest seen holds judgement,
//     then is republished above every number seen with a `store_rollback` event;
//   - the agent: a lease gone while the current generation still lists it is taken back, its
//     workers kept; gone after the job moved on without it is an eviction (workers killed, a new
//     incarnation); gone after the store rolled back (its `gen` below what the agent saw, its claim
//     naming this or a dead incarnation) is taken back, workers kept, and the join announced;
//   - both: a leader whose store connection was reopened, or which took its own lease back, judges
//     no lease for a lease's time (a restart from a snapshot in which some leases had run out).
#include <gtest/gtest.h>

#include <functional>
#include <thread>

#include "elastic/job_keys.h"
#include "elastic/lease_timing.h"
#include "elastic/membership_agent.h"
#include "elastic/membership_controller.h"
#include "elastic/memory_store.h"
#include "tests/elastic/controller_fixture.h"
#include "tests/elastic/forwarding_store.h"
#include "tests/support/log_capture.h"

namespace hdp::elastic {
namespace {

using namespace std::chrono_literals;

constexpr StoreTroubleRule kRule{.hold = 300ms, .slow_read = 100ms};

class StoreTroubleController : public test::ControllerFixture {
 protected:
  MembershipController leader() {
    store_->set(keys::kLeader, "leader");
    return MembershipController(store_, "leader", {1, 16}, Store::Duration::zero(), Store::Duration::zero(),
                                Store::Duration::zero(), kRule);
  }
  std::vector<std::string> members() {
    const auto number = store_->get(keys::kGeneration).value();
    std::vector<std::string> names;
    for (const auto& m : decode_generation(*store_->get(keys::generation(std::stoll(number))), "gen").members) {
      names.push_back(m.node);
    }
    return names;
  }
  void bring_back(const std::string& node) {
    auto& registration = nodes_.at(node);
    ASSERT_TRUE(registration.reclaim(0, registration.lease().incarnation, "test"));
  }
};

TEST_F(StoreTroubleController, MostLeasesGoneAtOnceHoldJudgementAndThoseStillGoneAreDroppedAfterIt) {
  join("a");
  join("b");
  join("c");
  auto controller = leader();
  ASSERT_EQ(controller.tick(), 1);
  expire("a");
  expire("b");
  EXPECT_EQ(controller.tick(), std::nullopt) << "two of three leases gone at once: the store's trouble";
  bring_back("a");  // its agent took its lease back within the hold
  std::this_thread::sleep_for(kRule.hold + 50ms);
  ASSERT_EQ(controller.tick(), 2) << "b is still gone after the hold: dropped";
  EXPECT_EQ(members(), (std::vector<std::string>{"a", "c"}));
}

TEST_F(StoreTroubleController, OneLostMemberIsDroppedAtOnceUnlessTheAgentAskedForAHold) {
  join("a");
  join("b");
  join("c");
  auto controller = leader();
  ASSERT_EQ(controller.tick(), 1);
  expire("c");
  ASSERT_EQ(controller.tick(), 2);
  EXPECT_EQ(members(), (std::vector<std::string>{"a", "b"}));
  // The leading agent's own calls failed: it holds judgement for a while.
  controller.hold_judgement(std::chrono::steady_clock::now() + 200ms);
  expire("b");
  EXPECT_EQ(controller.tick(), std::nullopt);
  std::this_thread::sleep_for(250ms);
  ASSERT_EQ(controller.tick(), 3);
  EXPECT_EQ(members(), (std::vector<std::string>{"a"}));
}

class SlowReads final : public test::ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  std::atomic<bool> slow{false};
  std::vector<std::optional<std::string>> multi_get(const std::vector<std::string>& keys) override {
    if (slow) std::this_thread::sleep_for(kRule.slow_read + 50ms);
    return ForwardingStore::multi_get(keys);
  }
};

TEST_F(StoreTroubleController, ATickWhoseReadsWereSlowJudgesNoLease) {
  join("a");
  join("b");
  auto slow = std::make_shared<SlowReads>(store_);
  store_->set(keys::kLeader, "leader");
  MembershipController controller(slow, "leader", {1, 16}, Store::Duration::zero(), Store::Duration::zero(),
                                  Store::Duration::zero(), kRule);
  ASSERT_EQ(controller.tick(), 1);
  expire("b");
  slow->slow = true;
  EXPECT_EQ(controller.tick(), std::nullopt) << "the reads took longer than slow_read: the lease says nothing";
  slow->slow = false;
  EXPECT_EQ(controller.tick(), std::nullopt) << "judgement is held for the rule's hold";
  std::this_thread::sleep_for(kRule.hold + 50ms);
  ASSERT_EQ(controller.tick(), 2);
  EXPECT_EQ(members(), (std::vector<std::string>{"a"}));
}

TEST_F(StoreTroubleController, AGenerationThatWentBackIsRepublishedAboveEveryNumberSeenAfterTheHold) {
  join("a");
  join("b");
  auto controller = leader();
  ASSERT_EQ(controller.tick(), 1);
  join("c");
  ASSERT_EQ(controller.tick(), 2);
  // The store rolls back to before c joined: `gen` says 1 again, c's announcement is gone with
  // the rest; its agent, which saw generation 2, takes its lease back and announces again.
  store_->set(keys::kGeneration, "1");
  nodes_.at("c").announce();
  EXPECT_EQ(controller.tick(/*seen_by_leader=*/2), std::nullopt) << "a rollback holds judgement";
  std::this_thread::sleep_for(kRule.hold + 50ms);
  ASSERT_EQ(controller.tick(2), 3) << "published above 2, the newest number seen";
  EXPECT_EQ(members(), (std::vector<std::string>{"a", "b", "c"}));
  bool event = false;
  for (const auto& e : store_->stream_tail(keys::kEvents, 20)) {
    event = event || (e.fields.at(0).second == "store_rollback");
  }
  EXPECT_TRUE(event) << "the rollback is an event";
  // The same members and a rollback seen only in what an agent saw (5): republished above it.
  EXPECT_EQ(controller.tick(5), std::nullopt);
  std::this_thread::sleep_for(kRule.hold + 50ms);
  ASSERT_EQ(controller.tick(5), 6);
  EXPECT_EQ(members(), (std::vector<std::string>{"a", "b", "c"}));
}

// Workers of a simulated node: started and killed, counted.
class CountedWorkers final : public NodeWorkers {
 public:
  std::vector<int> healthy() const override { return started_ ? std::vector<int>{0} : std::vector<int>{}; }
  void start_all(const NodeLease&) override { started_ = true; }
  void kill_all() override {
    started_ = false;
    ++kills;
  }
  int kills = 0;

 private:
  bool started_ = false;
};

class StoreTroubleAgent : public ::testing::Test {
 protected:
  struct Node {
    CountedWorkers workers;
    std::unique_ptr<MembershipAgent> agent;
  };
  Node& start(const std::string& name, std::function<int()> store_connection = {}) {
    MembershipAgentOptions options;
    options.store_connection = std::move(store_connection);
    options.job = "trouble";
    options.node = NodeLease{.node = name, .host = "127.0.0.1", .pid = 1, .version = "test", .slots = 1};
    options.node.healthy = {0};
    options.nnodes = {1, 16};
    options.timing = derive_lease_timing(600ms, std::nullopt);
    options.settle = 0ms;
    auto& node = nodes_[name];
    node.agent = std::make_unique<MembershipAgent>(options, store_, node.workers);
    node.agent->register_node();
    return node;
  }
  // Heartbeats and leader ticks until every node is in the running generation (at most 5 s).
  void converge() {
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (std::chrono::steady_clock::now() < deadline) {
      bool all = true;
      for (auto& [name, node] : nodes_) {
        node.agent->heartbeat();
        if (node.agent->leading()) node.agent->lead();
      }
      for (auto& [name, node] : nodes_) {
        node.agent->heartbeat();
        all = all && node.agent->view().member;
      }
      if (all) return;
      std::this_thread::sleep_for(20ms);
    }
    FAIL() << "the nodes did not converge";
  }
  void lose_lease(const std::string& name) {
    const auto& lease = nodes_.at(name).agent->lease();
    ASSERT_TRUE(store_->erase(keys::lease(lease.node, lease.incarnation)));
  }
  bool has_lease(const std::string& name) {
    const auto& lease = nodes_.at(name).agent->lease();
    return store_->get(keys::lease(lease.node, lease.incarnation)).has_value();
  }
  std::int64_t generation() { return std::stoll(store_->get(keys::kGeneration).value_or("0")); }
  // Nodes a, b and c, converged; the one that leads (empty: none does).
  std::string three_nodes_and_their_leader() {
    for (const char* name : {"a", "b", "c"}) start(name);
    converge();
    for (auto& [name, node] : nodes_) {
      if (node.agent->leading()) return name;
    }
    return "";
  }

  std::shared_ptr<MemoryStore> store_ = std::make_shared<MemoryStore>();
  std::map<std::string, Node> nodes_;
};

// A leader that leaves the job (a drain, a stop of its node) erases its own lease, which the hold
// rule otherwise reads as the store's trouble: it publishes the generation without its node
// before it gives up the leader lease, rather than leaving that to a successor's next heartbeat.
TEST_F(StoreTroubleAgent, ALeaderThatLeavesPublishesTheGenerationWithoutItsNodeFirst) {
  const std::string leader = three_nodes_and_their_leader();
  ASSERT_FALSE(leader.empty());
  const std::int64_t before = generation();
  nodes_.at(leader).agent->leave();
  ASSERT_EQ(generation(), before + 1) << "the leaving leader published nothing";
  const Generation g = decode_generation(store_->get(keys::generation(before + 1)).value(), "gen");
  ASSERT_EQ(g.members.size(), 2u);
  for (const auto& m : g.members) EXPECT_NE(m.node, leader);
  EXPECT_FALSE(store_->get(keys::kLeader).has_value()) << "the leader lease was not given up";
  EXPECT_FALSE(nodes_.at(leader).agent->leading());
}

// A job with an outcome (completed here) publishes nothing more: its agents all leave at once, and
// a last tick of the leaving leader would read the others' erased leases as the store's trouble.
TEST_F(StoreTroubleAgent, ALeaderLeavingAJobWithAnOutcomePublishesNothingAndGivesUpTheLease) {
  const std::string leader = three_nodes_and_their_leader();
  ASSERT_FALSE(leader.empty());
  store_->set(keys::kOutcome, "completed");
  const std::int64_t before = generation();
  hdp::test::LogCapture logged;
  for (auto& [name, node] : nodes_) {
    if (name != leader) node.agent->leave();
  }
  nodes_.at(leader).agent->leave();
  EXPECT_EQ(generation(), before) << "a generation was published after the job's outcome";
  EXPECT_EQ(logged.text().find("ran out at once"), std::string::npos) << logged.text();
  EXPECT_FALSE(store_->get(keys::kLeader).has_value()) << "the leader lease was not given up";
  EXPECT_FALSE(nodes_.at(leader).agent->leading());
}

TEST_F(StoreTroubleAgent, ALeaseGoneWhileTheGenerationStillListsTheNodeIsTakenBackWithItsWorkers) {
  start("a");
  start("b");
  converge();
  const std::string incarnation = nodes_.at("b").agent->lease().incarnation;
  lose_lease("a");  // a stall: every lease ran out together
  lose_lease("b");
  nodes_.at("b").agent->heartbeat();
  EXPECT_TRUE(has_lease("b"));
  EXPECT_EQ(nodes_.at("b").agent->lease().incarnation, incarnation);
  EXPECT_EQ(nodes_.at("b").workers.kills, 0) << "no worker restarted for the store's trouble";
  nodes_.at("a").agent->heartbeat();
  EXPECT_EQ(nodes_.at("a").workers.kills, 0);
  const std::int64_t before = generation();
  for (auto& [name, node] : nodes_) {
    if (node.agent->leading()) node.agent->lead();
  }
  EXPECT_EQ(generation(), before) << "nobody was dropped";
}

TEST_F(StoreTroubleAgent, ALeaseGoneAfterTheJobMovedOnWithoutTheNodeIsAnEviction) {
  start("a");
  start("b");
  converge();
  const std::string leader = nodes_.at("a").agent->leading() ? "a" : "b", other = leader == "a" ? "b" : "a";
  const std::string incarnation = nodes_.at(other).agent->lease().incarnation;
  lose_lease(other);  // cut off alone: the leader, which reached the store all along, drops it
  const std::int64_t before = generation();
  // The leader reads every lease in full once a heartbeat (MembershipController::read_leases).
  const auto deadline = std::chrono::steady_clock::now() + 2s;
  while (generation() == before && std::chrono::steady_clock::now() < deadline) {
    nodes_.at(leader).agent->lead();
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_GT(generation(), before);
  nodes_.at(other).agent->heartbeat();
  EXPECT_EQ(nodes_.at(other).workers.kills, 1) << "evicted: its workers belong to a dropped incarnation";
  EXPECT_NE(nodes_.at(other).agent->lease().incarnation, incarnation);
}

// Leader ticks (each followed by a heartbeat of the leader's, which keeps its own lease) until the generation
// changes or `limit` passes; the time it took.
std::chrono::milliseconds lead_until_published(MembershipAgent& leader, const std::function<std::int64_t()>& generation,
                                               std::chrono::milliseconds limit) {
  const std::int64_t before = generation();
  const auto began = std::chrono::steady_clock::now();
  while (generation() == before && std::chrono::steady_clock::now() - began < limit) {
    leader.lead();  // first: a tick that reopened the connection holds before it judges
    leader.heartbeat();
    std::this_thread::sleep_for(10ms);
  }
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - began);
}

// A store restarted from a snapshot in which one lease had run out and the other had not: the
// leader's reads succeed (its connection was reopened on the way), and only the reopening says the
// store's data may be older than the nodes. The follower's lease is not judged for a hold (the
// lease, 600 ms); still gone after it, the follower is dropped.
TEST_F(StoreTroubleAgent, AReopenedStoreConnectionHoldsTheLeadersJudgementForALease) {
  int connection = 0;
  start("a", [&] { return connection; });
  start("b", [&] { return connection; });
  converge();
  const std::string leader = nodes_.at("a").agent->leading() ? "a" : "b", other = leader == "a" ? "b" : "a";
  lose_lease(other);
  ++connection;  // the server restarted under both agents
  const auto took = lead_until_published(*nodes_.at(leader).agent, [&] { return generation(); }, 3s);
  EXPECT_GE(took, 550ms) << "the lease missing after the reopening was judged within the hold";
  EXPECT_LT(took, 3s) << "a lease still gone after the hold was never judged";
}

// The leader finds its own lease gone, takes it back at its heartbeat, and only then ticks: the
// follower's lease, gone with it, is held for a lease, long enough for the follower's heartbeat to
// take it back; nobody is dropped.
TEST_F(StoreTroubleAgent, ALeaderThatTookItsOwnLeaseBackJudgesNoOtherLeaseForALease) {
  start("a");
  start("b");
  converge();
  const std::string leader = nodes_.at("a").agent->leading() ? "a" : "b", other = leader == "a" ? "b" : "a";
  lose_lease("a");
  lose_lease("b");
  nodes_.at(leader).agent->heartbeat();
  ASSERT_TRUE(has_lease(leader));
  const auto took = lead_until_published(*nodes_.at(leader).agent, [&] { return generation(); }, 400ms);
  EXPECT_GE(took, 400ms) << "the follower was dropped before it could take its lease back";
  const std::int64_t before = generation();
  for (const auto end = std::chrono::steady_clock::now() + 1s; std::chrono::steady_clock::now() < end;) {
    nodes_.at(other).agent->heartbeat();
    EXPECT_TRUE(has_lease(other));
    nodes_.at(leader).agent->heartbeat();
    nodes_.at(leader).agent->lead();
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(generation(), before) << "nobody was dropped";
  EXPECT_EQ(nodes_.at(other).workers.kills + nodes_.at(leader).workers.kills, 0);
}

TEST_F(StoreTroubleAgent, ALeaseGoneAfterARollbackIsTakenBackEvenFromADeadIncarnationsClaim) {
  start("a");
  start("b");
  converge();
  const std::int64_t seen = generation();
  const auto& lease = nodes_.at("b").agent->lease();
  // Rolled back to before this incarnation registered: an older `gen`, b's claim naming a dead
  // incarnation, b's lease and announcement missing.
  lose_lease("b");
  store_->set(keys::node("b"), "0123456789abcdef");
  store_->set(keys::kGeneration, std::to_string(seen - 1));
  store_->set(keys::generation(seen - 1), *store_->get(keys::generation(seen)));
  nodes_.at("b").agent->heartbeat();
  EXPECT_EQ(nodes_.at("b").workers.kills, 0);
  EXPECT_TRUE(has_lease("b"));
  EXPECT_EQ(store_->get(keys::node("b")), lease.incarnation);
  // A claim that a live incarnation holds is not taken over.
  store_->set(keys::kGeneration, std::to_string(seen - 1));
  lose_lease("a");
  store_->set(keys::node("a"), "fedcba9876543210");
  store_->set_with_ttl(keys::lease("a", "fedcba9876543210"), "x", 60s);
  EXPECT_THROW(nodes_.at("a").agent->heartbeat(), NodeIdInUse) << "another agent holds the node id";
  EXPECT_EQ(nodes_.at("a").workers.kills, 1);
}

}  // namespace
}  // namespace hdp::elastic
