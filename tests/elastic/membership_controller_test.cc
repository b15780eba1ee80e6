// The leader's membership logic on a MemoryStore: leases written by hand stand in for agents.
#include "elastic/membership_controller.h"
#include "elastic/preparing_workers.h"

#include <gtest/gtest.h>

#include <thread>

#include "common/error.h"
#include "elastic/job_keys.h"
#include "elastic/job_state.h"
#include "elastic/memory_store.h"
#include "elastic/node_registration.h"
#include "tests/elastic/controller_fixture.h"
#include "tests/elastic/forwarding_store.h"

namespace hdp::elastic {
namespace {

using namespace std::chrono_literals;

class ControllerTest : public test::ControllerFixture {
 protected:
  Generation current() {
    auto number = store_->get(keys::kGeneration).value();
    return decode_generation(*store_->get(keys::generation(std::stoll(number))), "gen");
  }
  std::vector<std::string> nodes() {
    std::vector<std::string> names;
    for (const auto& m : current().members) names.push_back(m.node);
    return names;
  }
};

TEST_F(ControllerTest, FirstGenerationHasEveryNodeInJoinOrderWithContiguousRanks) {
  join("a");
  join("b", 3);
  join("c");
  auto leader = controller();
  ASSERT_EQ(leader.tick(), 1);
  EXPECT_EQ(nodes(), (std::vector<std::string>{"a", "b", "c"}));
  const auto g = current();
  EXPECT_EQ(g.world_size(), 7);
  EXPECT_EQ(g.members[1].first_rank, 2);
  EXPECT_EQ(g.members[2].first_rank, 5);
  EXPECT_EQ(store_->hash_get_all(keys::kState)["status"], "running");
  EXPECT_EQ(leader.tick(), std::nullopt);  // nothing changed: nothing published
}

TEST_F(ControllerTest, SurvivorsKeepTheirOrderAndNewcomersFollow) {
  join("a");
  join("b");
  join("c");
  auto leader = controller();
  leader.tick();
  expire("a");  // a's lease expired
  join("d");
  ASSERT_EQ(leader.tick(), 2);
  EXPECT_EQ(nodes(), (std::vector<std::string>{"b", "c", "d"}));
}

TEST_F(ControllerTest, JoinsWaitForTheSettleWindowLeavesDoNot) {
  join("a");
  auto leader = controller({1, 16}, 300ms);
  EXPECT_EQ(leader.tick(), std::nullopt);  // the first join starts the window
  std::this_thread::sleep_for(150ms);
  join("b");
  EXPECT_EQ(leader.tick(), std::nullopt);
  std::this_thread::sleep_for(200ms);
  ASSERT_EQ(leader.tick(), 1);  // both joins in one generation
  EXPECT_EQ(nodes(), (std::vector<std::string>{"a", "b"}));
  expire("b");
  EXPECT_EQ(leader.tick(), 2);  // a leave is published at once
}

// A joiner prepared beside the running job (elastic/preparing_workers.h): the agent's side keeps
// the node's preparing key while its workers set up and it is no member; the leader does not admit
// it into the running generation until the key is gone, then at once (its settle window ran
// meanwhile). The key lives as long as the lease's TTL unless renewed, and is erased once the
// workers are ready, when the node is a member, and for an earlier incarnation.
TEST_F(ControllerTest, AJoinerIsAdmittedOnceItsWorkersAreSetUp) {
  join("a");
  auto leader = controller({1, 16}, 300ms);
  EXPECT_EQ(leader.tick(), std::nullopt);
  std::this_thread::sleep_for(300ms);
  ASSERT_EQ(leader.tick(), 1);
  auto& b = join("b");
  PreparingWorkers preparing;
  preparing.set(true);
  preparing.sync(*store_, "b", b.lease().incarnation, false, 60s);
  const std::string key = keys::preparing("b", b.lease().incarnation);
  ASSERT_TRUE(store_->get(key).has_value());
  ASSERT_TRUE(store_->remaining_ttl({key})[0].has_value()) << "the key has the lease's TTL";
  EXPECT_EQ(leader.tick(), std::nullopt);
  std::this_thread::sleep_for(400ms);  // past the settle window
  EXPECT_EQ(leader.tick(), std::nullopt) << "b is preparing";
  EXPECT_EQ(nodes(), std::vector<std::string>{"a"});
  // Meanwhile b stands by: the ranks count it when a member leaves (a leave it makes up goes on).
  EXPECT_EQ(store_->get(keys::kStandby).value_or(""), "b");
  EXPECT_EQ(store_->hash_get_all(keys::kState)["standby"], "b");
  EXPECT_EQ(store_->hash_get_all(keys::kState)["preparing"], "b") << "standing by, not ready: `hdp status` says so";
  preparing.set(false);
  preparing.sync(*store_, "b", b.lease().incarnation, false, 60s);
  EXPECT_FALSE(store_->get(key).has_value());
  ASSERT_EQ(leader.tick(), 2) << "ready after the window: admitted at the next tick";
  EXPECT_EQ(nodes(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(store_->get(keys::kStandby).value_or("?"), "");
  EXPECT_EQ(store_->hash_get_all(keys::kState)["preparing"], "");
  // A member writes no key; a new incarnation's replaces an earlier one's.
  preparing.set(true);
  preparing.sync(*store_, "b", b.lease().incarnation, true, 60s);
  EXPECT_FALSE(store_->get(key).has_value());
  preparing.sync(*store_, "b", b.lease().incarnation, false, 60s);
  EXPECT_TRUE(store_->get(key).has_value());
  preparing.sync(*store_, "b", "later", false, 60s);
  EXPECT_FALSE(store_->get(key).has_value());
  EXPECT_TRUE(store_->get(keys::preparing("b", "later")).has_value());
}

// A spare at MAX whose workers still set up stands by as preparing; once they are set up the same
// members stay, and the state says it is ready (the standby list itself unchanged).
TEST_F(ControllerTest, ASpareIsListedAsPreparingUntilItsWorkersAreSetUp) {
  join("a");
  auto leader = controller({1, 1});
  ASSERT_EQ(leader.tick(), 1);
  auto& b = join("b");
  PreparingWorkers preparing;
  preparing.set(true);
  preparing.sync(*store_, "b", b.lease().incarnation, false, 60s);
  EXPECT_EQ(leader.tick(), std::nullopt);
  EXPECT_EQ(store_->hash_get_all(keys::kState)["standby"], "b");
  EXPECT_EQ(store_->hash_get_all(keys::kState)["preparing"], "b");
  preparing.set(false);
  preparing.sync(*store_, "b", b.lease().incarnation, false, 60s);
  EXPECT_EQ(leader.tick(), std::nullopt) << "at MAX: b stands by";
  EXPECT_EQ(nodes(), std::vector<std::string>{"a"});
  EXPECT_EQ(store_->hash_get_all(keys::kState)["standby"], "b");
  EXPECT_EQ(store_->hash_get_all(keys::kState)["preparing"], "") << "b's workers are set up";
  // A worker of b restarted: preparing again, listed again.
  preparing.set(true);
  preparing.sync(*store_, "b", b.lease().incarnation, false, 60s);
  EXPECT_EQ(leader.tick(), std::nullopt);
  EXPECT_EQ(store_->hash_get_all(keys::kState)["preparing"], "b");
}

// A leader that takes over writes the standby list and its preparing nodes as it finds them, even
// when they are empty: what a leader before it wrote (a spare since gone, a joiner since set up)
// does not stay in the state.
TEST_F(ControllerTest, ANewLeaderReplacesTheStandbyListsItsPredecessorLeft) {
  join("a");
  {
    auto first = controller();
    ASSERT_EQ(first.tick(), 1);
  }
  // What a leader that died wrote while a spare "b" prepared; b has left since.
  store_->set(keys::kStandby, "b");
  ASSERT_TRUE(store_->commit(Transaction{}.add(Write::hash_set(keys::kState, {{"standby", "b"}, {"preparing", "b"}}))));
  auto next = controller();
  EXPECT_EQ(next.tick(), std::nullopt);
  EXPECT_EQ(store_->get(keys::kStandby).value_or("?"), "");
  EXPECT_EQ(store_->hash_get_all(keys::kState)["standby"], "");
  EXPECT_EQ(store_->hash_get_all(keys::kState)["preparing"], "");
}

TEST_F(ControllerTest, BelowMinTheGenerationWaitsAboveMaxNodesStandBy) {
  join("a");
  auto leader = controller({2, 3});
  ASSERT_EQ(leader.tick(), 1);
  EXPECT_EQ(current().status, GenerationStatus::kWaiting);
  EXPECT_EQ(store_->hash_get_all(keys::kState)["status"], "waiting");
  join("b");
  join("c");
  join("d");
  ASSERT_EQ(leader.tick(), 2);
  EXPECT_EQ(current().status, GenerationStatus::kRunning);
  EXPECT_EQ(nodes(), (std::vector<std::string>{"a", "b", "c"}));
  expire("b");  // the standby node takes the free place
  ASSERT_EQ(leader.tick(), 3);
  EXPECT_EQ(nodes(), (std::vector<std::string>{"a", "c", "d"}));
}

TEST_F(ControllerTest, FailedSlotsLeaveAndRecoveredSlotsReturn) {
  auto& a = join("a", 4);
  join("b", 2);
  auto leader = controller();
  leader.tick();
  ASSERT_TRUE(a.heartbeat({0, 1, 3}, 1).alive);
  ASSERT_EQ(leader.tick(), 2);
  EXPECT_EQ(current().world_size(), 5);
  EXPECT_EQ(current().members[0].slots, (std::vector<int>{0, 1, 3}));
  ASSERT_TRUE(a.heartbeat({0, 1, 2, 3}, 2).alive);
  ASSERT_EQ(leader.tick(), 3);
  EXPECT_EQ(current().world_size(), 6);
}

TEST_F(ControllerTest, ABrokenGenerationIsReplacedEvenWithTheSameMembers) {
  join("a");
  join("b");
  auto leader = controller();
  leader.tick();
  store_->set(keys::broken(1), "a/0: peer lost");
  ASSERT_EQ(leader.tick(), 2);
  EXPECT_EQ(nodes(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(leader.tick(), std::nullopt);
}

TEST_F(ControllerTest, AnEvictedIncarnationIsNotAMemberAndItsReturnIsANewOne) {
  auto& a = join("a");
  join("b");
  auto leader = controller();
  leader.tick();
  const std::string old = a.lease().incarnation;
  expire("a");  // expired while the agent was paused
  EXPECT_FALSE(a.heartbeat({0, 1}, 1).alive);
  ASSERT_EQ(leader.tick(), 2);
  EXPECT_EQ(nodes(), (std::vector<std::string>{"b"}));
  a.register_new_incarnation(1s);
  ASSERT_EQ(leader.tick(), 3);
  EXPECT_EQ(nodes(), (std::vector<std::string>{"b", "a"}));
  EXPECT_NE(current().members[1].incarnation, old);
}

// A join number taken but not announced yet (its agent is between the two calls, or the key was
// removed) holds back nobody after it, and is read again on later ticks.
TEST_F(ControllerTest, AJoinNumberNotYetAnnouncedHoldsBackNoLaterOneAndIsReadWhenItAppears) {
  join("a");
  auto leader = controller();
  ASSERT_EQ(leader.tick(), 1);
  store_->add(keys::kJoinCount, 1);  // number 2 taken, its announcement not written yet
  join("c");                         // number 3
  ASSERT_EQ(leader.tick(), 2);
  EXPECT_EQ(nodes(), (std::vector<std::string>{"a", "c"}));
  // b's announcement lands on number 2 (late), and its own number 4 is left a hole.
  join("b");
  store_->set(keys::join(2), store_->get(keys::join(4)).value());
  store_->erase(keys::join(4));
  ASSERT_EQ(leader.tick(), 3);
  EXPECT_EQ(nodes(), (std::vector<std::string>{"a", "c", "b"}));
  // A new leader would resume before the pending hole, never past it.
  EXPECT_EQ(decode_generation(*store_->get(keys::generation(3)), "gen:3").joins_seen, 3);
}

// A standby read late (its number was a hole when first read) stands by in its number's place,
// before later numbers, and a new leader would resume before the smallest number standing by.
TEST_F(ControllerTest, AStandbyReadLateStandsByInJoinOrder) {
  join("a");
  auto leader = controller({1, 1});
  ASSERT_EQ(leader.tick(), 1);
  store_->add(keys::kJoinCount, 1);  // number 2 taken, its announcement not written yet
  join("c");                         // number 3
  join("e");                         // number 4
  EXPECT_EQ(leader.tick(), std::nullopt) << "c and e stand by (MAX 1)";
  join("b");  // number 5, its announcement moved to 2 (late), 5 left a hole
  store_->set(keys::join(2), store_->get(keys::join(5)).value());
  store_->erase(keys::join(5));
  EXPECT_EQ(leader.tick(), std::nullopt);
  EXPECT_EQ(store_->get(keys::kStandby).value_or(""), "b,c,e");
  expire("a");
  ASSERT_EQ(leader.tick(), 2);
  EXPECT_EQ(nodes(), std::vector<std::string>{"b"}) << "the first in join order takes the place";
  EXPECT_EQ(store_->get(keys::kStandby).value_or(""), "c,e");
  EXPECT_EQ(decode_generation(*store_->get(keys::generation(2)), "gen:2").joins_seen, 2) << "c's number is 3";
}

TEST_F(ControllerTest, NothingIsPublishedAfterTheJobCompleted) {
  join("a");
  join("b");
  auto leader = controller();
  ASSERT_EQ(leader.tick(), 1);
  JobState job(store_);
  ASSERT_TRUE(job.complete(1, 60));
  expire("b");  // agents leave once their workers are done
  EXPECT_EQ(leader.tick(), std::nullopt);
  EXPECT_EQ(store_->hash_get_all(keys::kState)["status"], "completed");
  EXPECT_FALSE(job.complete(0, 1));  // fenced like every generation's write
}

TEST_F(ControllerTest, ALeaderThatLostItsLeasePublishesNothing) {
  join("a");
  auto leader = controller();
  store_->set(keys::kLeader, "someone-else");
  EXPECT_EQ(leader.tick(), std::nullopt);
  EXPECT_EQ(store_->get(keys::kGeneration), std::nullopt);
}

TEST_F(ControllerTest, GenerationNumbersNeverGoBackAfterTheStoreLosesThem) {
  auto& a = join("a");
  ASSERT_TRUE(a.heartbeat({0, 1}, 41).alive);  // the agent had seen generation 41 before a Redis wipe
  auto leader = controller();
  ASSERT_EQ(leader.tick(), 42);
}

// Issue 13, defect 14: a leader that read announcements up to 3 before the store lost its data
// reads the counter's new start, and waits the rejoin window (not only the settle window) for the
// returning members, so that they come back in one generation above every earlier one.
TEST_F(ControllerTest, AfterTheStoreLostItsDataTheReturningMembersComeBackInOneGeneration) {
  join("a");
  join("b");
  join("c");
  store_->set(keys::kLeader, "leader");
  MembershipController leader(store_, "leader", {1, 16}, Store::Duration::zero(), 300ms);
  // The job's first generation waits the rejoin window too (nothing tells it from a store that lost
  // its generations).
  auto tick_until_published = [&](std::chrono::steady_clock::time_point since) {
    std::optional<std::int64_t> published;
    while (!published && std::chrono::steady_clock::now() - since < 5s) {
      published = leader.tick();
      if (!published) std::this_thread::sleep_for(10ms);
    }
    EXPECT_GE(std::chrono::steady_clock::now() - since, 300ms);
    return published;
  };
  ASSERT_EQ(tick_until_published(std::chrono::steady_clock::now()), 1);

  store_->clear();
  store_->set(keys::kLeader, "leader");
  for (const std::string node : {"a", "b"}) {
    ASSERT_TRUE(nodes_.at(node).reestablish(1));
    nodes_.at(node).announce();  // joins 1 and 2, below the 3 already read
  }
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(leader.tick(), std::nullopt);  // waiting for the others to return
  ASSERT_TRUE(nodes_.at("c").reestablish(1));
  nodes_.at("c").announce();
  ASSERT_EQ(tick_until_published(start), 2);
  const Generation generation = decode_generation(*store_->get(keys::generation(2)), "gen:2");
  ASSERT_EQ(generation.members.size(), 3u);
  for (const auto& member : generation.members) {
    EXPECT_EQ(member.incarnation, nodes_.at(member.node).lease().incarnation);
  }
}

// The same when only `joins` was removed (by hand): announcements numbered from its new start
// are read, not ignored until the counter passes the old position.
TEST_F(ControllerTest, AJoinCounterThatWentBackIsReadFromItsNewStart) {
  join("a");
  join("b");
  auto leader = controller();
  ASSERT_EQ(leader.tick(), 1);
  ASSERT_TRUE(store_->erase(keys::kJoinCount));
  join("c");  // join number 1 again
  ASSERT_EQ(leader.tick(), 2);
  EXPECT_EQ(decode_generation(*store_->get(keys::generation(2)), "gen:2").members.size(), 3u);
}

TEST_F(ControllerTest, GarbageInTheStoreIsAClearErrorNotAnAction) {
  join("a");
  auto leader = controller();
  store_->set(keys::kGeneration, "banana");
  try {
    leader.tick();
    FAIL() << "accepted a non-numeric generation";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'gen'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(store_->get(keys::kGeneration), "banana");  // nothing was overwritten
}

// With full_read_every (an agent passes its heartbeat period), a quiet tick reads no lease value;
// a lease that expires is seen at the first tick after its TTL ran out (reading that lease alone),
// and a rewritten value at the next full read.
class LeaseReadsTest : public ControllerTest {
 protected:
  class CountingStore final : public ForwardingStore {
   public:
    using ForwardingStore::ForwardingStore;
    std::vector<std::optional<std::string>> multi_get(const std::vector<std::string>& keys) override {
      for (const auto& key : keys) leases_read += key.starts_with("lease:");
      return ForwardingStore::multi_get(keys);
    }
    int leases_read = 0;
  };
  // Three agents with leases of 600 ms and two slots each, and a leader with generation 1.
  MembershipController start(Store::Duration full_read_every) {
    for (const std::string node : {"a", "b", "c"}) {
      NodeLease lease{.node = node, .host = "127.0.0.1", .pid = 1, .version = "test", .slots = 2, .healthy = {0, 1}};
      agents_.emplace(node, NodeRegistration(store_, lease, 600ms)).first->second.register_new_incarnation(1s);
    }
    store_->set(keys::kLeader, "leader");
    MembershipController leader(counting_, "leader", {1, 16}, Store::Duration::zero(), Store::Duration::zero(),
                                full_read_every);
    EXPECT_EQ(leader.tick(), 1);
    return leader;
  }
  void refresh(const std::vector<std::string>& nodes, std::int64_t generation) {
    for (const auto& node : nodes) {
      auto& agent = agents_.at(node);
      ASSERT_TRUE(agent.heartbeat(agent.lease().healthy, generation).alive) << node;
    }
  }
  std::shared_ptr<CountingStore> counting_ = std::make_shared<CountingStore>(store_);
  std::map<std::string, NodeRegistration> agents_;
};

TEST_F(LeaseReadsTest, QuietTicksReadNoLeaseAndAnExpiredOneIsSeenAtTheNextTick) {
  auto leader = start(60s);
  ASSERT_EQ(leader.tick(), std::nullopt);
  const int before = counting_->leases_read;
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(leader.tick(), std::nullopt);
    refresh({"a", "b", "c"}, 1);
  }
  EXPECT_EQ(counting_->leases_read, before) << "quiet ticks read lease values";

  // c stops refreshing. Its TTL as last read ran out no later than its expiry: the tick after it
  // reads c's lease alone and publishes the generation without it.
  const auto last_refresh = std::chrono::steady_clock::now();
  refresh({"c"}, 1);
  std::optional<std::int64_t> published;
  int reads = 0;
  while (!published && std::chrono::steady_clock::now() - last_refresh < 3s) {
    std::this_thread::sleep_for(10ms);
    refresh({"a", "b"}, 1);
    const int was = counting_->leases_read;
    published = leader.tick();
    reads += counting_->leases_read - was;
  }
  ASSERT_EQ(published, 2) << "the expired lease was never noticed";
  const auto noticed = std::chrono::steady_clock::now() - last_refresh;
  EXPECT_GE(noticed, 600ms);
  EXPECT_LT(noticed, 600ms + 300ms) << "a tick is 10 ms here; the rest is scheduling";
  // No full read in this loop (60 s): a lease is read only when the TTL last read for it runs out.
  // Each of the three was last read at the full read before the quiet ticks, so each is read at
  // most once when that TTL (600 ms from then) runs out, which its refreshes since have made
  // early; a and b are then good for another 600 ms, and c is read once more at its real expiry
  // when its early read came before it (slower runs, under the sanitizers).
  EXPECT_GE(reads, 1);
  EXPECT_LE(reads, 4);
  EXPECT_EQ(nodes(), (std::vector<std::string>{"a", "b"}));
}

// An agent that deregisters (a drain, a stop) erases its lease long before its TTL would have run
// out and before the next full read: the leader sees it at its next tick from `last_leave`, and
// publishes the generation without that node. Without `last_leave` this waits for the full read
// (60 s here).
TEST_F(LeaseReadsTest, ADeregisteredAgentIsSeenAtTheNextTick) {
  auto leader = start(60s);
  ASSERT_EQ(leader.tick(), std::nullopt);
  // Garbage of another type under the key: read as absent, replaced by the deregistration.
  ASSERT_TRUE(store_->commit(Transaction{}.add(Write::hash_set(keys::kLastLeave, {{"x", "1"}}))));
  ASSERT_EQ(leader.tick(), std::nullopt);
  agents_.at("b").deregister();
  refresh({"a", "c"}, 1);
  EXPECT_EQ(leader.tick(), 2);
  EXPECT_EQ(nodes(), (std::vector<std::string>{"a", "c"}));
  EXPECT_EQ(store_->get(keys::kLastLeave), "b/" + agents_.at("b").lease().incarnation);
  // Read once: after the tick that reads the new member list's leases, the ticks are quiet again.
  EXPECT_EQ(leader.tick(), std::nullopt);
  const int before = counting_->leases_read;
  for (int i = 0; i < 3; ++i) EXPECT_EQ(leader.tick(), std::nullopt);
  EXPECT_EQ(counting_->leases_read, before);
}

TEST_F(LeaseReadsTest, ARewrittenValueIsSeenWithinTheFullReadPeriod) {
  auto leader = start(300ms);
  ASSERT_EQ(leader.tick(), std::nullopt);
  ASSERT_TRUE(agents_.at("a").heartbeat({1}, 1).alive);  // slot 0 failed
  const auto rewritten = std::chrono::steady_clock::now();
  std::optional<std::int64_t> published;
  while (!published && std::chrono::steady_clock::now() - rewritten < 2s) {
    std::this_thread::sleep_for(10ms);
    refresh({"b", "c"}, 1);
    published = leader.tick();
  }
  ASSERT_EQ(published, 2) << "the rewritten lease was never read";
  EXPECT_LT(std::chrono::steady_clock::now() - rewritten, 300ms + 200ms);
  EXPECT_EQ(current().members[0].slots, (std::vector<int>{1}));
}

TEST(Membership, LeaseAndGenerationDecodersRejectGarbage) {
  EXPECT_THROW(decode_node_lease("not json", "node:x"), InvalidArgument);
  EXPECT_THROW(decode_node_lease(R"({"node":"x"})", "node:x"), InvalidArgument);
  EXPECT_THROW(decode_node_lease(R"({"node":"x","incarnation":"1","host":"h","pid":1,"version":"v","slots":2,
                                    "healthy":[1,0],"last_generation":0})",
                                 "node:x"),
               InvalidArgument);  // slots out of order
  EXPECT_THROW(decode_generation(R"({"generation":2,"status":"running","world_size":9,"members":[],
                                     "joins_seen":0,"created_ms":0})",
                                 "gen:2"),
               InvalidArgument);  // world size disagrees
  EXPECT_THROW(decode_generation_number("-3", "gen"), InvalidArgument);
  EXPECT_THROW(decode_generation_number("12abc", "gen"), InvalidArgument);
  EXPECT_EQ(decode_generation_number("12", "gen"), 12);
}

TEST(Membership, NnodesParsing) {
  EXPECT_EQ(parse_nnodes("3").min_nodes, 3);
  EXPECT_EQ(parse_nnodes("2:5").max_nodes, 5);
  for (const char* bad : {"3:2", "0", ":", "a:b", "2:", "-1:3", ""}) {
    EXPECT_THROW(parse_nnodes(bad), InvalidArgument) << bad;
  }
  EXPECT_THROW(validate_job_id("has space"), InvalidArgument);
  EXPECT_NO_THROW(validate_job_id("job-1.a_b"));
}

}  // namespace
}  // namespace hdp::elastic
