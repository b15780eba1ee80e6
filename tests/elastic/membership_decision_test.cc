// File: tests/elastic/membership_decision_test.cc
//
// The leader's membership decision (elastic/membership_decision.h) as a pure function: its rules
// one by one on small views, and properties that hold on many random views (no store, no clock).
#include "elastic/membership_decision.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "elastic/job_keys.h"
#include "elastic/release.h"

namespace hdp::elastic {
namespace {

using namespace std::chrono_literals;
using Action = MembershipDecision::Action;

constexpr std::int64_t kNow = 1'000'000;  // wall clock of the views, ms

Member member(const std::string& node, std::vector<int> slots) { return {node, "i-" + node, "h-" + node, slots, 0}; }
JoinCandidate candidate(std::int64_t sequence, const std::string& node) { return {sequence, node, "i-" + node}; }
NodeLease lease(const std::string& node, std::vector<int> healthy, std::int64_t last_generation = 0) {
  return {.node = node,
          .incarnation = "i-" + node,
          .host = "h-" + node,
          .slots = 4,
          .healthy = std::move(healthy),
          .last_generation = last_generation};
}
Eviction eviction(const std::string& node, int slot, std::int64_t until_ms, const std::string& reason = "slow") {
  return {.node = node, .incarnation = "i-" + node, .slot = slot, .count = 1, .until_ms = until_ms, .reason = reason};
}

// A view of generation 1 with `members` and `candidates` (kept alive by the fixture), the leases
// added by live(), and no settle window.
class Decision : public ::testing::Test {
 protected:
  MembershipView view(JobConfig config = {1, 16}) {
    MembershipView v{
        .config = config, .generation = members_.empty() ? 0 : 1, .members = members_, .candidates = candidates_};
    v.now_ms = kNow;
    v.now = MembershipView::Clock::now();
    return v;
  }
  static void live(MembershipView& v, const NodeLease& l) { v.leases[keys::lease(l.node, l.incarnation)] = l; }
  // view(), with a and b live and candidate b's workers preparing.
  MembershipView view_with_b_preparing(JobConfig config = {1, 16}) {
    auto v = view(config);
    live(v, lease("a", {0}));
    live(v, lease("b", {0}));
    v.preparing = {{"b", "i-b"}};
    return v;
  }
  static std::vector<std::string> nodes(const std::vector<Member>& members) {
    std::vector<std::string> out;
    for (const auto& m : members) out.push_back(m.node);
    return out;
  }

  std::vector<Member> members_;
  std::vector<JoinCandidate> candidates_;
};

TEST_F(Decision, AMemberWhoseLeaseExpiredLeavesAtOnce) {
  members_ = {member("a", {0}), member("b", {0})};
  auto v = view();
  v.settle = 10s;
  live(v, lease("a", {0}));
  const auto d = desired_members(v);
  EXPECT_EQ(d.action, Action::kPublish);
  EXPECT_EQ(nodes(d.members), std::vector<std::string>{"a"});
}

TEST_F(Decision, ALeaseOfAnotherIdentityUnderTheKeyIsNoLease) {
  members_ = {member("a", {0}), member("b", {0})};
  auto v = view();
  live(v, lease("a", {0}));
  v.leases[keys::lease("b", "i-b")] = lease("c", {0});
  EXPECT_EQ(nodes(desired_members(v).members), std::vector<std::string>{"a"});
}

TEST_F(Decision, FailedSlotsLeaveAtOnceAndTheNodeStaysWithTheOthers) {
  members_ = {member("a", {0, 1}), member("b", {0, 1})};
  auto v = view();
  v.settle = 10s;
  live(v, lease("a", {0, 1}));
  live(v, lease("b", {1}));
  const auto d = desired_members(v);
  EXPECT_EQ(d.action, Action::kPublish);
  ASSERT_EQ(d.members.size(), 2u);
  EXPECT_EQ(d.members[1].slots, std::vector<int>{1});
  live(v, lease("b", {}));  // no healthy slot left: not a member
  EXPECT_EQ(nodes(desired_members(v).members), std::vector<std::string>{"a"});
}

TEST_F(Decision, JoinsWaitTheSettleWindow) {
  members_ = {member("a", {0})};
  candidates_ = {candidate(3, "b")};
  auto v = view();
  v.settle = 1s;
  live(v, lease("a", {0}));
  live(v, lease("b", {0}));
  auto d = desired_members(v);
  EXPECT_EQ(d.action, Action::kSettle);
  ASSERT_TRUE(d.pending_since.has_value());
  EXPECT_EQ(*d.pending_since, v.now);
  v.pending_since = v.now - 999ms;
  EXPECT_EQ(desired_members(v).action, Action::kSettle);
  v.pending_since = v.now - 1s;
  d = desired_members(v);
  EXPECT_EQ(d.action, Action::kPublish);
  EXPECT_EQ(nodes(d.members), (std::vector<std::string>{"a", "b"}));
}

// A candidate whose workers are still preparing (preparing_workers.h) is left out of a running
// generation, listed as preparing, while its settle window runs; once they are set up it is
// published at once if the window has passed. Another candidate, ready, is not held up by it.
TEST_F(Decision, ACandidateStillPreparingWaitsAndItsSettleWindowRunsMeanwhile) {
  members_ = {member("a", {0})};
  candidates_ = {candidate(3, "b"), candidate(4, "c")};
  auto v = view();
  v.settle = 1s;
  live(v, lease("a", {0}));
  live(v, lease("b", {0}));
  v.preparing = {{"b", "i-b"}, {"c", "i-c"}};
  auto d = desired_members(v);
  EXPECT_EQ(d.action, Action::kRepair);
  EXPECT_EQ(nodes(d.members), std::vector<std::string>{"a"});
  ASSERT_EQ(d.preparing.size(), 1u) << "c has no lease: it is no candidate any more";
  EXPECT_EQ(d.preparing[0].node, "b");
  // b stands by meanwhile: a member's leave that it would make up does not stop the job.
  ASSERT_EQ(d.standby.size(), 1u);
  EXPECT_EQ(d.standby[0].node, "b");
  ASSERT_TRUE(d.pending_since.has_value()) << "the window starts while b prepares";
  EXPECT_EQ(*d.pending_since, v.now);
  v.pending_since = v.now - 3s;
  d = desired_members(v);
  EXPECT_EQ(d.action, Action::kRepair);
  EXPECT_EQ(*d.pending_since, v.now - 3s) << "the window keeps its start";
  v.preparing.clear();  // b is set up: the window has passed, so at once
  d = desired_members(v);
  EXPECT_EQ(d.action, Action::kPublish);
  EXPECT_EQ(nodes(d.members), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(d.preparing.empty());
  // With c live and ready while b prepares, c joins alone after the window.
  live(v, lease("c", {0}));
  v.preparing = {{"b", "i-b"}};
  v.pending_since = v.now - 1s;
  d = desired_members(v);
  EXPECT_EQ(d.action, Action::kPublish);
  EXPECT_EQ(nodes(d.members), (std::vector<std::string>{"a", "c"}));
  ASSERT_EQ(d.preparing.size(), 1u);
  EXPECT_EQ(d.candidates.size(), 2u) << "b stays a candidate";
  ASSERT_EQ(d.standby.size(), 1u) << "and stands by";
  EXPECT_EQ(d.standby[0].node, "b");
}

// Nobody's preparation holds up a first generation, or one waiting below MIN: no rank runs.
TEST_F(Decision, APreparingCandidateIsAdmittedWhenNoRankRuns) {
  candidates_ = {candidate(1, "a")};
  auto v = view();
  live(v, lease("a", {0}));
  v.preparing = {{"a", "i-a"}};
  auto d = desired_members(v);
  EXPECT_EQ(d.action, Action::kPublish);
  EXPECT_EQ(nodes(d.members), std::vector<std::string>{"a"});
  EXPECT_TRUE(d.preparing.empty());
  members_ = {member("a", {0})};
  candidates_ = {candidate(2, "b")};
  v = view_with_b_preparing({2, 4});
  v.status = GenerationStatus::kWaiting;
  d = desired_members(v);
  EXPECT_EQ(d.action, Action::kPublish);
  EXPECT_EQ(nodes(d.members), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(d.status, GenerationStatus::kRunning);
  // A running generation that would fall below MIN without it (a member lost): admitted with the rest.
  members_ = {member("a", {0}), member("x", {0})};
  v = view_with_b_preparing({2, 4});
  d = desired_members(v);
  EXPECT_EQ(d.action, Action::kPublish);
  EXPECT_EQ(nodes(d.members), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(d.preparing.empty());
  // A cordoned candidate waits as cordoned, not as preparing.
  members_ = {member("a", {0})};
  v = view_with_b_preparing();
  v.cordons["b"] = {};
  d = desired_members(v);
  EXPECT_EQ(nodes(d.members), std::vector<std::string>{"a"});
  EXPECT_TRUE(d.preparing.empty());
  // One without a healthy slot (its workers restarting) neither: it could not make up a leave.
  v = view_with_b_preparing();
  live(v, lease("b", {}));
  d = desired_members(v);
  EXPECT_EQ(nodes(d.members), std::vector<std::string>{"a"});
  EXPECT_TRUE(d.preparing.empty());
  EXPECT_TRUE(d.standby.empty());
}

TEST_F(Decision, WithNoGenerationJoinsWaitTheRejoinWindowWhenLonger) {
  candidates_ = {candidate(1, "a")};
  auto v = view();
  v.settle = 1s;
  v.rejoin_window = 5s;
  live(v, lease("a", {0}));
  v.pending_since = v.now - 2s;
  EXPECT_EQ(desired_members(v).action, Action::kSettle);
  v.pending_since = v.now - 5s;
  EXPECT_EQ(desired_members(v).action, Action::kPublish);
}

TEST_F(Decision, ALeaveWithAJoinIsPublishedWithoutTheSettleWindow) {
  members_ = {member("a", {0}), member("b", {0})};
  candidates_ = {candidate(3, "c")};
  auto v = view();
  v.settle = 10s;
  live(v, lease("a", {0}));
  live(v, lease("c", {0}));
  const auto d = desired_members(v);
  EXPECT_EQ(d.action, Action::kPublish);
  EXPECT_EQ(nodes(d.members), (std::vector<std::string>{"a", "c"}));
}

TEST_F(Decision, SurvivorsKeepTheirOrderNewcomersFollowInJoinOrderUpToMaxTheRestStandBy) {
  members_ = {member("c", {0}), member("x", {0}), member("a", {0})};
  candidates_ = {candidate(5, "d"), candidate(7, "b"), candidate(8, "f"), candidate(9, "e")};
  auto v = view({1, 4});
  for (const char* node : {"c", "a", "d", "b", "e"}) live(v, lease(node, {0}));  // x and f are dead
  const auto d = desired_members(v);
  EXPECT_EQ(d.action, Action::kPublish);
  EXPECT_EQ(nodes(d.members), (std::vector<std::string>{"c", "a", "d", "b"}));
  ASSERT_EQ(d.standby.size(), 1u);
  EXPECT_EQ(d.standby[0].node, "e");
  // The dead candidate is forgotten; the live ones (admitted or not) stay candidates.
  std::vector<std::string> alive;
  for (const auto& c : d.candidates) alive.push_back(c.node);
  EXPECT_EQ(alive, (std::vector<std::string>{"d", "b", "e"}));
}

TEST_F(Decision, BelowTheMinimumTheStatusIsWaiting) {
  members_ = {member("a", {0})};
  candidates_ = {candidate(2, "b")};
  auto v = view({3, 4});
  live(v, lease("a", {0}));
  live(v, lease("b", {0}));
  auto d = desired_members(v);
  EXPECT_EQ(d.action, Action::kPublish);
  EXPECT_EQ(d.status, GenerationStatus::kWaiting);
  candidates_.push_back(candidate(3, "c"));
  v = view({3, 4});
  for (const char* node : {"a", "b", "c"}) live(v, lease(node, {0}));
  EXPECT_EQ(desired_members(v).status, GenerationStatus::kRunning);
}

TEST_F(Decision, ACordonedCandidateIsNotAdmittedButACordonedMemberStays) {
  members_ = {member("a", {0})};
  candidates_ = {candidate(2, "b"), candidate(3, "c")};
  auto v = view({1, 2});
  for (const char* node : {"a", "b", "c"}) live(v, lease(node, {0}));
  v.cordons = {{"a", {}}, {"b", {}}};
  const auto d = desired_members(v);
  EXPECT_EQ(nodes(d.members), (std::vector<std::string>{"a", "c"}));
  EXPECT_TRUE(d.standby.empty()) << "a cordoned candidate does not stand by either";
}

// elastic/release.h: a candidate of another build than the live members' is refused, neither
// admitted nor standing by; a refusal alone changes no membership (the state is only repaired).
TEST_F(Decision, ACandidateOfAnotherBuildThanTheMembersIsRefusedNotAdmittedNorStandingBy) {
  members_ = {member("a", {0})};
  candidates_ = {candidate(2, "b"), candidate(3, "c"), candidate(4, "d"), candidate(5, "e")};
  auto v = view({1, 2});
  auto built = [](NodeLease l, const char* version, int wire) {
    l.version = version;
    l.wire = wire;
    return l;
  };
  live(v, built(lease("a", {0}), "0.1.0", 1));
  live(v, built(lease("b", {0}), "0.2.0", 1));
  live(v, built(lease("c", {0}), "0.1.0", 2));
  live(v, built(lease("d", {0}), "0.1.0", 1));
  live(v, built(lease("e", {0}), "0.1.0", 0));  // an older agent: no wire recorded
  auto d = desired_members(v);
  EXPECT_EQ(nodes(d.members), (std::vector<std::string>{"a", "d"}));
  ASSERT_EQ(d.standby.size(), 1u) << "e, of the job's version, stands by at max_nodes; b and c do not";
  EXPECT_EQ(d.standby[0].node, "e");
  ASSERT_EQ(d.refused.size(), 2u);
  EXPECT_EQ(d.refused[0].candidate.node, "b");
  EXPECT_EQ(d.refused[0].why, "its build (hdp 0.2.0, wire 1) is not the job's (hdp 0.1.0, wire 1, node a)");
  EXPECT_EQ(d.refused[1].candidate.node, "c");
  EXPECT_EQ(d.candidates.size(), 4u) << "the refused stay candidates while their lease lives";

  candidates_ = {candidate(2, "b")};
  v = view({1, 2});
  live(v, built(lease("a", {0}), "0.1.0", 1));
  live(v, built(lease("b", {0}), "0.2.0", 1));
  d = desired_members(v);
  EXPECT_EQ(d.action, Action::kRepair) << "the refusal is written with the state's repair";
  EXPECT_EQ(d.refused.size(), 1u);
}

TEST_F(Decision, WithNoLiveMemberOrMembersOfTwoBuildsNoBuildIsRefused) {
  members_ = {member("a", {0})};  // its lease is gone
  candidates_ = {candidate(2, "b"), candidate(3, "c")};
  auto v = view({1, 2});
  NodeLease b = lease("b", {0}), c = lease("c", {0});
  b.version = "0.1.0";
  c.version = "0.2.0";
  live(v, b);
  live(v, c);
  auto d = desired_members(v);
  EXPECT_TRUE(d.refused.empty());
  EXPECT_EQ(nodes(d.members), (std::vector<std::string>{"b", "c"}));

  // Live members of two builds (admitted together at a start): nothing says which is the job's.
  members_ = {member("b", {0}), member("c", {0})};
  candidates_ = {candidate(4, "e")};
  v = view({1, 3});
  NodeLease e = lease("e", {0});
  e.version = "0.3.0";
  live(v, b);
  live(v, c);
  live(v, e);
  d = desired_members(v);
  EXPECT_TRUE(d.refused.empty());
  EXPECT_EQ(nodes(d.members), (std::vector<std::string>{"b", "c", "e"}));
}

// A member of an older agent records no wire: the job's wire is the one the others record, and a
// candidate of another wire is refused; members of two recorded wires are two builds.
TEST_F(Decision, AnUnrecordedWireMatchesAnyButTwoRecordedWiresAreTwoBuilds) {
  members_ = {member("a", {0}), member("b", {0})};
  candidates_ = {candidate(3, "c")};
  auto v = view({1, 3});
  auto built = [](NodeLease l, int wire) {
    l.version = "0.1.0";
    l.wire = wire;
    return l;
  };
  live(v, built(lease("a", {0}), 0));
  live(v, built(lease("b", {0}), 1));
  live(v, built(lease("c", {0}), 2));
  auto d = desired_members(v);
  ASSERT_EQ(d.refused.size(), 1u);
  EXPECT_EQ(d.refused[0].why, "its build (hdp 0.1.0, wire 2) is not the job's (hdp 0.1.0, wire 1, node b)");

  live(v, built(lease("a", {0}), 2));  // a records wire 2, b wire 1: two builds
  d = desired_members(v);
  EXPECT_TRUE(d.refused.empty());
  EXPECT_EQ(nodes(d.members), (std::vector<std::string>{"a", "b", "c"}));
}

TEST_F(Decision, TheSameMembersOnlyRepairTheState) {
  members_ = {member("a", {0, 1})};
  candidates_ = {candidate(2, "b")};
  auto v = view({1, 1});
  live(v, lease("a", {0, 1}));
  live(v, lease("b", {0}));
  v.pending_since = v.now - 1s;
  const auto d = desired_members(v);
  EXPECT_EQ(d.action, Action::kRepair);
  EXPECT_FALSE(d.pending_since.has_value());
  ASSERT_EQ(d.standby.size(), 1u);
}

TEST_F(Decision, NoMemberAndNoGenerationIsNothingToDo) {
  candidates_ = {candidate(1, "a")};
  auto v = view();
  live(v, lease("a", {}));  // registered, no worker running yet
  EXPECT_EQ(desired_members(v).action, Action::kNothing);
}

TEST_F(Decision, ABrokenOrRolledBackGenerationIsReplacedByTheSameMembers) {
  members_ = {member("a", {0})};
  auto v = view();
  v.settle = 10s;
  live(v, lease("a", {0}, 7));
  v.seen_by_leader = 4;
  EXPECT_EQ(desired_members(v).action, Action::kRepair);
  v.broken = true;
  auto d = desired_members(v);
  EXPECT_EQ(d.action, Action::kPublish);
  EXPECT_EQ(d.newest_seen, 7) << "above every number a live lease saw";
  v.broken = false;
  v.rolled_back = true;
  EXPECT_EQ(desired_members(v).action, Action::kPublish);
}

TEST_F(Decision, AnEvictedNodeIsLeftOutUntilItsCoolDownEnds) {
  members_ = {member("a", {0})};  // b/0, its only slot, is evicted: b is benched
  auto v = view({1, 4});
  v.settle = 1s;
  v.pending_since = v.now - 1s;
  live(v, lease("a", {0}));
  live(v, lease("b", {0}));
  v.evictions = {{"b/0", eviction("b", 0, kNow + 1)}};
  auto d = desired_members(v);
  EXPECT_EQ(d.action, Action::kRepair);
  EXPECT_EQ(nodes(d.members), std::vector<std::string>{"a"});

  v.evictions = {{"b/0", eviction("b", 0, kNow)}};  // the cool-down ended: admitted like a join
  d = desired_members(v);
  EXPECT_EQ(d.action, Action::kPublish);
  EXPECT_EQ(nodes(d.members), (std::vector<std::string>{"a", "b"}));
  ASSERT_EQ(d.evictions.outcomes.size(), 1u);
  EXPECT_EQ(d.evictions.outcomes[0].kind, EvictionOutcome::Kind::kReadmitted);
  EXPECT_TRUE(d.evictions.record.at("b/0").readmitted);
  EXPECT_TRUE(d.evictions.record_changed);
}

TEST_F(Decision, ANewEvictionLeavesTheSlotOutAndIsRecorded) {
  members_ = {member("a", {0}), member("b", {0, 1})};
  auto v = view({1, 4});
  live(v, lease("a", {0}));
  live(v, lease("b", {0, 1}));
  v.fresh.evictions = {eviction("b", 1, kNow + 60'000)};
  v.fresh.steps = {{"b/1", 12}};
  const auto d = desired_members(v);
  EXPECT_EQ(d.action, Action::kPublish);
  ASSERT_EQ(d.members.size(), 2u);
  EXPECT_EQ(d.members[1].slots, std::vector<int>{0});
  ASSERT_EQ(d.evictions.outcomes.size(), 1u);
  EXPECT_EQ(d.evictions.outcomes[0].kind, EvictionOutcome::Kind::kEvicted);
  EXPECT_EQ(d.evictions.outcomes[0].step, 12);
  EXPECT_TRUE(d.evictions.record.contains("b/1"));
  EXPECT_TRUE(d.evictions.record_changed);
}

TEST_F(Decision, AnEvictionThatWouldLeaveFewerThanMinNodesIsRefusedAndStillAnswered) {
  members_ = {member("a", {0}), member("b", {0})};
  auto v = view({2, 2});
  live(v, lease("a", {0}));
  live(v, lease("b", {0}));
  v.fresh.evictions = {eviction("b", 0, kNow + 60'000)};
  const auto d = desired_members(v);
  EXPECT_EQ(d.action, Action::kPublish) << "the ranks wait for an answer";
  EXPECT_EQ(nodes(d.members), (std::vector<std::string>{"a", "b"}));
  ASSERT_EQ(d.evictions.outcomes.size(), 1u);
  EXPECT_EQ(d.evictions.outcomes[0].kind, EvictionOutcome::Kind::kRefused);
  EXPECT_EQ(d.evictions.outcomes[0].nodes_left, 1u);
  EXPECT_FALSE(d.evictions.record_changed);
}

TEST_F(Decision, ACoolDownIsCutShortWhenTheJobWouldOtherwiseStayBelowItsMinimum) {
  members_ = {member("a", {0}), member("b", {0})};  // c is out, a just died
  auto v = view({2, 3});
  live(v, lease("b", {0}));
  live(v, lease("c", {0}));
  v.evictions = {{"c/0", eviction("c", 0, kNow + 600'000)}};
  const auto d = desired_members(v);
  EXPECT_TRUE(d.evictions.cooldowns_cut);
  EXPECT_EQ(nodes(d.members), (std::vector<std::string>{"b", "c"}));
  EXPECT_EQ(d.status, GenerationStatus::kRunning);
}

TEST_F(Decision, ATimeoutEvictionOfADeadIncarnationIsDropped) {
  members_ = {member("a", {0}), member("b", {0})};
  auto v = view();
  live(v, lease("a", {0}));
  v.fresh.evictions = {eviction("b", 0, kNow + 60'000, "timeout")};
  const auto d = desired_members(v);
  EXPECT_TRUE(d.evictions.outcomes.empty());
  EXPECT_FALSE(d.evictions.record_changed);
  EXPECT_EQ(nodes(d.members), std::vector<std::string>{"a"});
}

TEST(LeaseIdentities, MembersCandidatesThenBenchedNodesOnce) {
  const std::vector<Member> members = {member("a", {0})};
  const std::vector<JoinCandidate> candidates = {candidate(4, "b")};
  const Evictions evictions = {{"a/1", eviction("a", 1, 0)},
                               {"c/0", eviction("c", 0, 0)},
                               {"c/1", eviction("c", 1, 0)}};
  const auto ids = lease_identities(members, candidates, evictions);
  const std::vector<std::pair<std::string, std::string>> expected = {{"a", "i-a"}, {"b", "i-b"}, {"c", "i-c"}};
  EXPECT_EQ(ids, expected);
}

// ---- Properties on random views ----------------------------------------------------------------

struct RandomView {
  std::vector<Member> members;
  std::vector<JoinCandidate> candidates;
  MembershipView view;
};

// A random view as a tick could read it: each node has at most one live lease; an eviction in its
// cool-down names no slot of a current member (the generation that evicted it left it out); the
// current generation has at most max_nodes members.
RandomView random_view(std::mt19937& rng) {
  auto chance = [&](double p) { return std::bernoulli_distribution(p)(rng); };
  auto number = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto subset = [&](int slots, double p) {
    std::vector<int> out;
    for (int s = 0; s < slots; ++s) {
      if (chance(p)) out.push_back(s);
    }
    return out;
  };
  RandomView r;
  MembershipView& v = r.view;
  const int max_nodes = number(1, 6);
  v.config = {number(1, max_nodes), max_nodes};
  v.now_ms = kNow;
  v.now = MembershipView::Clock::now();
  std::vector<std::string> nodes;
  for (int i = 0; i < 9; ++i) nodes.push_back("n" + std::to_string(i));
  std::shuffle(nodes.begin(), nodes.end(), rng);
  std::int64_t sequence = 0;
  for (const auto& node : nodes) {
    const int slots = number(1, 3);
    const std::string incarnation = "i" + std::to_string(number(0, 3));
    NodeLease l{.node = node, .incarnation = incarnation, .host = "h", .slots = slots};
    l.version = chance(0.85) ? "0.1.0" : "0.2.0";  // builds (release.h): mostly one
    l.wire = chance(0.9) ? 1 : number(0, 2);
    l.healthy = chance(0.7) ? subset(slots, 1.0) : subset(slots, 0.5);
    l.last_generation = number(0, 9);
    const int role = number(0, 3);  // member, candidate, benched, neither
    bool alive = chance(0.75);
    if (role == 0 && static_cast<int>(r.members.size()) < max_nodes) {
      auto slots_held = subset(slots, 0.7);
      if (slots_held.empty()) slots_held.push_back(0);
      r.members.push_back({node, incarnation, "h", slots_held, 0});
      if (chance(0.15)) {  // restarted: the member's incarnation is dead, a new one announced
        r.candidates.push_back({sequence += number(1, 3), node, incarnation + "-new"});
        l.incarnation += "-new";
      }
    } else if (role == 1) {
      r.candidates.push_back({sequence += number(1, 3), node, incarnation});
    } else if (role == 2) {
      for (int s = 0; s < slots; ++s) {
        v.evictions[eviction_key(node, s)] = {.node = node, .incarnation = incarnation, .slot = s, .count = 1,
                                              .until_ms = kNow + number(-2, 2) * 1000, .reason = "slow"};
      }
    } else {
      alive = false;
    }
    if (alive) v.leases[keys::lease(l.node, l.incarnation)] = l;
    if (chance(0.2)) v.cordons[node] = {};
  }
  for (const auto& m : r.members) {
    const int s = number(0, 3);
    if (chance(0.3) && std::find(m.slots.begin(), m.slots.end(), s) == m.slots.end()) {
      v.evictions[eviction_key(m.node, s)] = {.node = m.node, .incarnation = m.incarnation, .slot = s, .count = 2,
                                              .until_ms = kNow + number(-2, 2) * 1000, .reason = "slow",
                                              .readmitted = chance(0.5)};
    }
    for (int slot : m.slots) {
      if (!chance(0.2)) continue;
      v.fresh.evictions.push_back({.node = m.node, .incarnation = m.incarnation, .slot = slot, .count = 1,
                                   .until_ms = kNow + 60'000, .reason = chance(0.5) ? "slow" : "timeout"});
      v.fresh.steps[eviction_key(m.node, slot)] = number(-1, 50);
    }
  }
  v.generation = r.members.empty() && chance(0.5) ? 0 : number(1, 9);
  v.status = chance(0.8) ? GenerationStatus::kRunning : GenerationStatus::kWaiting;
  v.seen_by_leader = number(0, 12);
  v.broken = chance(0.1);
  v.rolled_back = chance(0.1);
  v.settle = std::chrono::milliseconds(number(0, 2) * 1000);
  if (chance(0.5)) v.pending_since = v.now - std::chrono::milliseconds(number(0, 3000));
  for (const auto& c : r.candidates) {
    if (chance(0.3)) v.preparing.emplace(c.node, c.incarnation);
  }
  v.members = r.members;
  v.candidates = r.candidates;
  return r;
}

bool live_and_healthy(const MembershipView& v, const Member& m) {
  auto it = v.leases.find(keys::lease(m.node, m.incarnation));
  if (it == v.leases.end() || it->second.healthy.empty()) return false;
  return std::includes(it->second.healthy.begin(), it->second.healthy.end(), m.slots.begin(), m.slots.end());
}

bool is_member(const MembershipView& v, const Member& m) {
  return std::any_of(v.members.begin(), v.members.end(), [&](const Member& x) { return same_identity(x, m); });
}

TEST(DecisionProperties, HoldOnRandomViews) {
  std::mt19937 rng(20240611);
  std::map<std::string, int> seen_cases;  // how often each rule came into play
  for (int i = 0; i < 2000; ++i) {
    const RandomView r = random_view(rng);
    const MembershipView& v = r.view;
    const MembershipDecision d = desired_members(v);
    SCOPED_TRACE("case " + std::to_string(i));
    for (const auto& o : d.evictions.outcomes) ++seen_cases["outcome " + std::to_string(static_cast<int>(o.kind))];
    seen_cases["cut"] += d.evictions.cooldowns_cut;
    seen_cases["standby"] += !d.standby.empty();
    seen_cases["waiting"] += d.status == GenerationStatus::kWaiting;
    ++seen_cases["action " + std::to_string(static_cast<int>(d.action))];

    // An eviction never takes the job below its minimum: at least min(MIN, live healthy members) nodes.
    const auto live_healthy = std::count_if(v.members.begin(), v.members.end(),
                                            [&](const Member& m) { return live_and_healthy(v, m); });
    EXPECT_GE(d.members.size(), static_cast<std::size_t>(std::min<long>(v.config.min_nodes, live_healthy)));
    // A live healthy member none of whose slots an eviction names is kept, with all its slots.
    for (const Member& m : v.members) {
      const bool evicted = std::any_of(m.slots.begin(), m.slots.end(), [&](int s) {
        return std::any_of(v.fresh.evictions.begin(), v.fresh.evictions.end(),
                           [&](const Eviction& e) { return e.node == m.node && e.slot == s; });
      });
      if (!live_and_healthy(v, m) || evicted) continue;
      auto kept =
          std::find_if(d.members.begin(), d.members.end(), [&](const Member& x) { return same_identity(x, m); });
      ASSERT_NE(kept, d.members.end()) << m.node;
      EXPECT_TRUE(std::includes(kept->slots.begin(), kept->slots.end(), m.slots.begin(), m.slots.end())) << m.node;
    }
    // No cordoned newcomer, never more than max_nodes, no node twice, nobody without a slot.
    std::set<std::string> seen;
    for (const Member& m : d.members) {
      EXPECT_TRUE(is_member(v, m) || !v.cordons.contains(m.node)) << m.node << " is cordoned";
      EXPECT_TRUE(seen.insert(m.node).second) << m.node << " is listed twice";
      EXPECT_FALSE(m.slots.empty()) << m.node;
    }
    EXPECT_LE(static_cast<int>(d.members.size()), v.config.max_nodes);
    for (const auto& c : d.standby) EXPECT_FALSE(v.cordons.contains(c.node)) << c.node;
    // Standing by: every candidate held preparing, and the others only beyond max_nodes.
    auto standing_by = [&](const JoinCandidate& c) {
      return std::any_of(d.standby.begin(), d.standby.end(),
                         [&](const JoinCandidate& x) { return same_identity(x, c); });
    };
    for (const auto& c : d.preparing) {
      EXPECT_TRUE(standing_by(c)) << c.node << " prepares and does not stand by";
      const auto lease = v.leases.find(keys::lease(c.node, c.incarnation));
      EXPECT_TRUE(lease != v.leases.end() && !lease->second.healthy.empty()) << c.node << " has no healthy slot";
    }
    for (const auto& c : d.standby) {
      const bool preparing = std::any_of(d.preparing.begin(), d.preparing.end(),
                                         [&](const JoinCandidate& x) { return same_identity(x, c); });
      EXPECT_TRUE(preparing || static_cast<int>(d.members.size()) == v.config.max_nodes) << c.node;
    }
    // Into a running generation, a candidate whose workers are preparing is admitted only when the
    // generation would be below MIN without the candidates preparing (then none is held).
    seen_cases["preparing"] += !d.preparing.empty();
    if (v.generation > 0 && v.status == GenerationStatus::kRunning) {
      const bool admitted_preparing = std::any_of(d.members.begin(), d.members.end(), [&](const Member& m) {
        return !is_member(v, m) && v.preparing.contains({m.node, m.incarnation});
      });
      if (admitted_preparing) {
        ++seen_cases["preparing admitted below MIN"];
        EXPECT_TRUE(d.preparing.empty());
        std::vector<JoinCandidate> ready;
        for (const auto& c : v.candidates) {
          if (!v.preparing.contains({c.node, c.incarnation})) ready.push_back(c);
        }
        MembershipView without = v;
        without.candidates = ready;
        EXPECT_LT(static_cast<int>(desired_members(without).members.size()), v.config.min_nodes);
      }
    }
    // Survivors first, in their relative order; the candidates admitted follow in join order.
    std::size_t survivors = 0;
    while (survivors < d.members.size() && is_member(v, d.members[survivors])) ++survivors;
    for (std::size_t k = survivors; k < d.members.size(); ++k) EXPECT_FALSE(is_member(v, d.members[k]));
    auto position = [&](const Member& m) {
      return std::find_if(v.members.begin(), v.members.end(), [&](const Member& x) { return same_identity(x, m); }) -
             v.members.begin();
    };
    for (std::size_t k = 1; k < survivors; ++k) EXPECT_LT(position(d.members[k - 1]), position(d.members[k]));
    std::int64_t last_sequence = -1;
    for (std::size_t k = survivors; k < d.members.size(); ++k) {
      auto c = std::find_if(v.candidates.begin(), v.candidates.end(),
                            [&](const JoinCandidate& x) { return same_identity(x, d.members[k]); });
      if (c == v.candidates.end()) continue;  // a benched node
      EXPECT_GT(c->sequence, last_sequence);
      last_sequence = c->sequence;
    }
    // Builds (release.h): with the live members all of one build, a candidate of another is refused
    // (neither admitted nor standing by) and every newcomer admitted is of theirs; with none live,
    // or of two builds, nothing is refused.
    std::vector<const NodeLease*> member_leases;
    for (const Member& m : v.members) {
      auto it = v.leases.find(keys::lease(m.node, m.incarnation));
      if (it != v.leases.end()) member_leases.push_back(&it->second);
    }
    // One build: every pair of live members agrees (one version, at most one recorded wire); the
    // reference is one that records its wire, if any does.
    bool one_build = !member_leases.empty();
    for (const NodeLease* x : member_leases) {
      for (const NodeLease* y : member_leases) one_build = one_build && !release_difference(*x, *y);
    }
    if (!member_leases.empty()) {
      std::stable_partition(member_leases.begin(), member_leases.end(), [](const NodeLease* l) { return l->wire > 0; });
    }
    seen_cases["refused"] += !d.refused.empty();
    if (!one_build) {
      EXPECT_TRUE(d.refused.empty());
    }
    for (const auto& r : d.refused) {
      const NodeLease& lease = v.leases.at(keys::lease(r.candidate.node, r.candidate.incarnation));
      EXPECT_TRUE(one_build && release_difference(lease, *member_leases.front())) << r.candidate.node;
      EXPECT_TRUE(std::none_of(d.members.begin(), d.members.end(), [&](const Member& m) { return same_identity(m, r.candidate); }))
          << r.candidate.node << " refused and admitted";
      EXPECT_TRUE(std::none_of(d.standby.begin(), d.standby.end(), [&](const JoinCandidate& c) { return same_identity(c, r.candidate); }))
          << r.candidate.node << " refused and standing by";
    }
    for (std::size_t k = survivors; k < d.members.size() && one_build; ++k) {
      auto lease = v.leases.find(keys::lease(d.members[k].node, d.members[k].incarnation));
      const bool candidate = std::any_of(v.candidates.begin(), v.candidates.end(),
                                         [&](const JoinCandidate& c) { return same_identity(c, d.members[k]); });
      if (candidate && lease != v.leases.end()) {
        EXPECT_FALSE(release_difference(lease->second, *member_leases.front())) << d.members[k].node;
      }
    }
    // The status follows the minimum.
    EXPECT_EQ(d.status, static_cast<int>(d.members.size()) >= v.config.min_nodes ? GenerationStatus::kRunning
                                                                                  : GenerationStatus::kWaiting);
  }
  // Every rule came into play: evictions taken, refused and readmitted, cool-downs cut short,
  // standbys, both statuses, every action, candidates refused for their build and held preparing.
  for (const char* rule : {"outcome 0", "outcome 1", "outcome 2", "cut", "standby", "waiting", "action 0", "action 1",
                           "action 2", "action 3", "refused", "preparing", "preparing admitted below MIN"}) {
    EXPECT_GE(seen_cases[rule], 1) << rule;
  }
}

}  // namespace
}  // namespace hdp::elastic
