// The leader's evictions on a MemoryStore (membership_controller.h, membership.h): a straggler
// request leaves the slot out of the next generation for its cool-down, the cool-down doubles per
// eviction of the same node/slot, a readmission waits for the settle window like a join, a node
// whose every slot is out comes back, a generation broken on a timeout evicts the member that
// never reported, the minimum size is never broken, and garbage in the records is ignored.
#include <gtest/gtest.h>

#include <thread>

#include "elastic/job_keys.h"
#include "elastic/job_state.h"
#include "elastic/membership.h"
#include "tests/elastic/controller_fixture.h"

namespace hdp::elastic {
namespace {

using namespace std::chrono_literals;

class EvictionTest : public test::ControllerFixture {
 protected:
  Generation current() {
    const auto number = std::stoll(store_->get(keys::kGeneration).value());
    return decode_generation(*store_->get(keys::generation(number)), "gen");
  }
  // node -> its slots in the current generation
  std::map<std::string, std::vector<int>> slots() {
    std::map<std::string, std::vector<int>> out;
    for (const auto& m : current().members) out[m.node] = m.slots;
    return out;
  }
  void request(const std::string& node, int slot, Cooldown cooldown) {
    const Generation g = current();
    const std::string incarnation = nodes_.at(node).lease().incarnation;
    store_->set(keys::stragglers(g.number),
                encode(std::vector<StragglerRequest>{{.node = node,
                                                      .incarnation = incarnation,
                                                      .slot = slot,
                                                      .rank = *g.rank_of(node, incarnation, slot),
                                                      .speed = 0.1,
                                                      .step = 12,
                                                      .cooldown = cooldown}}));
  }
  Evictions evictions() { return decode_evictions(store_->get(keys::kEvictions).value(), "evictions"); }
  std::vector<std::map<std::string, std::string>> events(const std::string& type) {
    std::vector<std::map<std::string, std::string>> out;
    for (const auto& e : store_->stream_tail(keys::kEvents, 1000)) {
      std::map<std::string, std::string> fields(e.fields.begin(), e.fields.end());
      if (fields["type"] == type) out.push_back(fields);
    }
    return out;
  }
};

TEST_F(EvictionTest, AStragglerIsLeftOutForItsCoolDownThenReadmittedAfterTheSettleWindow) {
  join("a");
  join("b");
  auto leader = controller({1, 16}, 100ms);
  EXPECT_EQ(leader.tick(), std::nullopt);  // the joins' settle window starts
  std::this_thread::sleep_for(120ms);
  ASSERT_EQ(leader.tick(), 1);
  ASSERT_EQ(leader.tick(), std::nullopt);  // settled: nothing to do
  EXPECT_EQ(current().world_size(), 4);

  request("b", 1, {.base_ms = 400, .max_ms = 10'000});
  const auto asked = std::chrono::steady_clock::now();
  ASSERT_TRUE(leader.tick().has_value());  // at once, not after the settle window
  EXPECT_EQ(slots()["b"], std::vector<int>{0});
  EXPECT_EQ(current().world_size(), 3);
  auto record = evictions().at("b/1");
  EXPECT_EQ(record.count, 1);
  EXPECT_EQ(record.reason, "slow");
  EXPECT_FALSE(record.readmitted);
  ASSERT_EQ(events("evict").size(), 1u);
  EXPECT_EQ(events("evict")[0]["step"], "12");
  EXPECT_EQ(events("evict")[0]["speed"], std::to_string(0.1));

  // The same request again (the key stays for an hour) is not acted on twice.
  EXPECT_EQ(leader.tick(), std::nullopt);
  // Out until the cool-down ends, then back after the settle window.
  std::optional<std::int64_t> back;
  while (!back && std::chrono::steady_clock::now() - asked < 3s) {
    back = leader.tick();
    if (!back) std::this_thread::sleep_for(20ms);
  }
  ASSERT_TRUE(back.has_value());
  const auto waited = std::chrono::steady_clock::now() - asked;
  EXPECT_GE(waited, 400ms + 100ms);
  EXPECT_EQ(slots()["b"], (std::vector<int>{0, 1}));
  EXPECT_TRUE(evictions().at("b/1").readmitted);
  ASSERT_EQ(events("readmit").size(), 1u);
  EXPECT_EQ(events("readmit")[0]["node"], "b");
}

TEST_F(EvictionTest, TheCoolDownDoublesWithEachEvictionOfTheSameSlotUpToItsMaximum) {
  join("a", 1);
  join("b", 1);
  auto leader = controller({1, 16});
  leader.tick();
  const Cooldown cooldown{.base_ms = 10'000, .max_ms = 25'000};
  for (int round = 1; round <= 3; ++round) {
    request("b", 0, cooldown);
    const std::int64_t before = now_ms();
    ASSERT_TRUE(leader.tick().has_value()) << round;
    EXPECT_EQ(slots().count("b"), 0u) << "a node with no slot left is not a member";
    const auto e = evictions().at("b/0");
    EXPECT_EQ(e.count, round);
    const std::int64_t expected = std::min<std::int64_t>(10'000 << (round - 1), 25'000);
    EXPECT_GE(e.until_ms - before, expected);
    EXPECT_LE(e.until_ms - before, expected + 1000);
    // End the cool-down by hand: b comes back (it is remembered from its record, though it is
    // neither a member nor a candidate any more).
    Evictions all = evictions();
    all.at("b/0").until_ms = now_ms() - 1;
    store_->set(keys::kEvictions, encode(all));
    ASSERT_TRUE(leader.tick().has_value()) << round;
    EXPECT_EQ(slots()["b"], std::vector<int>{0}) << round;
  }
  EXPECT_EQ(events("readmit").size(), 3u);
}

TEST_F(EvictionTest, NeverBelowTheMinimumSizeTheRequestIsRefusedAndAnsweredWithAGeneration) {
  join("a", 1);
  join("b", 1);
  auto leader = controller({2, 2});
  const auto first = leader.tick();
  ASSERT_TRUE(first.has_value());
  request("b", 0, {});
  const auto next = leader.tick();
  ASSERT_TRUE(next.has_value()) << "the ranks wait for an answer";
  EXPECT_EQ(slots().size(), 2u);
  EXPECT_EQ(current().status, GenerationStatus::kRunning);
  EXPECT_FALSE(store_->get(keys::kEvictions).has_value());
  ASSERT_EQ(events("evict_refused").size(), 1u);
  EXPECT_EQ(events("evict_refused")[0]["node"], "b");
  EXPECT_EQ(leader.tick(), std::nullopt);
}

TEST_F(EvictionTest, ACoolDownEndsEarlyWhenTheJobWouldOtherwiseStayBelowItsMinimum) {
  join("a", 1);
  join("b", 1);
  join("c", 1);
  auto leader = controller({2, 3});
  leader.tick();
  request("c", 0, {.base_ms = 600'000, .max_ms = 600'000});
  ASSERT_TRUE(leader.tick().has_value());
  EXPECT_EQ(slots().size(), 2u);
  expire("a");  // the job would now be at one node, below its minimum: c comes back at once
  ASSERT_TRUE(leader.tick().has_value());
  EXPECT_EQ(slots().size(), 2u);
  EXPECT_EQ(slots().count("c"), 1u);
  EXPECT_EQ(current().status, GenerationStatus::kRunning);
}

TEST_F(EvictionTest, AGenerationBrokenOnATimeoutEvictsTheMemberThatNeverReported) {
  join("a", 1);
  join("b", 1);
  join("c", 1);
  auto leader = controller({1, 16});
  leader.tick();
  const Generation g = current();
  // a and c timed out waiting in a collective; b (stopped) says nothing.
  const AbandonReport timed_out{.node = "a", .slot = 0, .timed_out = true, .timeout_ms = 2000,
                                .cooldown = {.base_ms = 5000, .max_ms = 60'000}};
  store_->commit(Transaction{}
                     .add(Write::set(keys::broken(g.number), "a/0: timed out"))
                     .add(Write::hash_set(keys::abandoned(g.number), {{"0", encode(timed_out)}})));
  const auto started = std::chrono::steady_clock::now();
  EXPECT_EQ(leader.tick(), std::nullopt) << "two members have not reported yet: wait";
  AbandonReport c = timed_out;
  c.node = "c";
  store_->commit(Transaction{}.add(Write::hash_set(keys::abandoned(g.number), {{"2", encode(c)}})));
  ASSERT_TRUE(leader.tick().has_value()) << "all but one reported: decide at once";
  EXPECT_LT(std::chrono::steady_clock::now() - started, 1s);
  EXPECT_EQ(slots().count("b"), 0u);
  EXPECT_EQ(slots().size(), 2u);
  const auto e = evictions().at("b/0");
  EXPECT_EQ(e.reason, "timeout");
  EXPECT_GE(e.until_ms - now_ms(), 4000);
  ASSERT_EQ(events("evict").size(), 1u);
  EXPECT_EQ(events("evict")[0]["reason"], "timeout");
}

TEST_F(EvictionTest, ABrokenGenerationWithoutATimeoutEvictsNobody) {
  join("a", 1);
  join("b", 1);
  join("c", 1);
  auto leader = controller({1, 16});
  leader.tick();
  const Generation g = current();
  const AbandonReport lost{.node = "a", .slot = 0, .timed_out = false, .timeout_ms = 2000, .cooldown = {}};
  store_->commit(Transaction{}
                     .add(Write::set(keys::broken(g.number), "a/0: peer lost"))
                     .add(Write::hash_set(keys::abandoned(g.number), {{"0", encode(lost)}})));
  ASSERT_TRUE(leader.tick().has_value());  // at once, as before
  EXPECT_EQ(slots().size(), 3u);
  EXPECT_FALSE(store_->get(keys::kEvictions).has_value());
}

TEST_F(EvictionTest, WhenSeveralNeverReportTheLeaderWaitsForTheLongestTimeout) {
  join("a", 1);
  join("b", 1);
  join("c", 1);
  auto leader = controller({1, 16});
  leader.tick();
  const Generation g = current();
  const AbandonReport timed_out{.node = "a", .slot = 0, .timed_out = true, .timeout_ms = 300, .cooldown = {}};
  store_->commit(Transaction{}
                     .add(Write::set(keys::broken(g.number), "a/0: timed out"))
                     .add(Write::hash_set(keys::abandoned(g.number), {{"0", encode(timed_out)}})));
  const auto started = std::chrono::steady_clock::now();
  std::optional<std::int64_t> published;
  while (!published && std::chrono::steady_clock::now() - started < 3s) {
    published = leader.tick();
    if (!published) std::this_thread::sleep_for(20ms);
  }
  ASSERT_TRUE(published.has_value());
  EXPECT_GE(std::chrono::steady_clock::now() - started, 300ms);
  EXPECT_EQ(slots().size(), 1u) << "b and c never reported";
  EXPECT_EQ(evictions().size(), 2u);
}

TEST_F(EvictionTest, GarbageInTheRecordsIsIgnoredAndPublishingGoesOn) {
  join("a", 1);
  join("b", 1);
  auto leader = controller({1, 16});
  leader.tick();
  store_->set(keys::kEvictions, "{not json");
  store_->set(keys::stragglers(current().number), "[1,2,3]");
  EXPECT_EQ(leader.tick(), std::nullopt);  // nothing to act on, nothing thrown
  expire("b");
  ASSERT_TRUE(leader.tick().has_value());  // publishing still works
  request("a", 0, {});  // a valid request, but a is the last node: refused
  ASSERT_TRUE(leader.tick().has_value());
  EXPECT_EQ(slots().size(), 1u);
  // Records that decode but lie are refused too.
  EXPECT_THROW(decode_evictions(R"({"x/0": {"node": "y", "incarnation": "i", "slot": 0, "count": 1, "until_ms": 5,
                                    "reason": "slow", "speed": 0.1, "readmitted": false}})", "evictions"),
               InvalidArgument);
  EXPECT_THROW(decode_evictions(R"({"y/0": {"node": "y", "incarnation": "i", "slot": 0, "count": 0, "until_ms": 5,
                                    "reason": "slow", "speed": 0.1, "readmitted": false}})", "evictions"),
               InvalidArgument);
  EXPECT_THROW(decode_straggler_requests(R"({"requests": [{"node": "", "incarnation": "i", "slot": 0, "rank": 0,
                                            "speed": 0.1, "step": 1, "cooldown_ms": 5, "cooldown_max_ms": 1}]})",
                                         "gen:1:stragglers"),
               InvalidArgument);
  EXPECT_THROW(decode_abandon_report(R"({"node": "a", "slot": 0, "timed_out": "yes", "timeout_ms": 1,
                                        "cooldown_ms": 5, "cooldown_max_ms": 5})", "gen:1:abandoned"),
               InvalidArgument);
}

TEST(Cooldown, DoublesPerEarlierEvictionAndStopsAtItsMaximum) {
  const Cooldown c{.base_ms = 60'000, .max_ms = 3'600'000};
  EXPECT_EQ(c.after(0), 60'000);
  EXPECT_EQ(c.after(1), 120'000);
  EXPECT_EQ(c.after(5), 1'920'000);
  EXPECT_EQ(c.after(6), 3'600'000);
  EXPECT_EQ(c.after(1'000'000'000), 3'600'000);  // no overflow
}

}  // namespace
}  // namespace hdp::elastic
