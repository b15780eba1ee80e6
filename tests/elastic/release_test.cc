// One build per job (elastic/release.h): what counts as another build, the refusal's record, and
// the control plane of `hdp agent` (MembershipAgent, on a MemoryStore) refusing a node of another
// release or wire before it joins: the leader admits it into no generation and writes its refusal
// once; the node's own heartbeat reads it, and it neither joins nor leads. The agent process's
// reaction (its workers stopped, exit 5) is tested in tests/agents/membership_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <thread>

#include "common/error.h"
#include "elastic/job_keys.h"
#include "elastic/membership_agent.h"
#include "elastic/memory_store.h"
#include "elastic/release.h"

namespace hdp::elastic {
namespace {

using namespace std::chrono_literals;

NodeLease build(const std::string& node, const std::string& version, int wire) {
  return {.node = node, .incarnation = "i-" + node, .version = version, .wire = wire, .slots = 1};
}

TEST(Release, AnotherVersionOrAnotherKnownWireIsAnotherBuild) {
  const NodeLease job = build("a", "0.1.0", 1);
  EXPECT_FALSE(release_difference(build("b", "0.1.0", 1), job));
  EXPECT_FALSE(release_difference(build("b", "0.1.0", 0), job)) << "an older agent records no wire: its version decides";
  EXPECT_FALSE(release_difference(build("b", "0.1.0", 2), build("a", "0.1.0", 0)));
  const auto version = release_difference(build("b", "0.2.0", 1), job);
  ASSERT_TRUE(version);
  EXPECT_EQ(*version, "its build (hdp 0.2.0, wire 1) is not the job's (hdp 0.1.0, wire 1, node a)");
  const auto wire = release_difference(build("b", "0.1.0", 2), job);
  ASSERT_TRUE(wire);
  EXPECT_EQ(*wire, "its build (hdp 0.1.0, wire 2) is not the job's (hdp 0.1.0, wire 1, node a)");
  EXPECT_TRUE(release_difference(build("b", "0.2.0", 0), job)) << "another version, whatever the wire";
}

TEST(Release, ARefusalRoundTripsAndGarbageIsRefusedNamingTheKey) {
  const Refusal refusal{.why = "its build differs", .by = "a/i-a", .at_ms = 1234};
  const Refusal back = decode_refusal(encode(refusal), "refusal:b/i-b");
  EXPECT_EQ(back.why, refusal.why);
  EXPECT_EQ(back.by, refusal.by);
  EXPECT_EQ(back.at_ms, refusal.at_ms);
  for (const char* garbage : {"", "refused", "[]", R"({"why":"","by":"a","at_ms":1})", R"({"why":"x","by":"a"})",
                              R"({"why":"x","by":"a","at_ms":-1})", R"({"why":7,"by":"a","at_ms":1})"}) {
    try {
      decode_refusal(garbage, "refusal:b/i-b");
      ADD_FAILURE() << "accepted " << garbage;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("refusal:b/i-b"), std::string::npos) << e.what();
    }
  }
}

// A node's workers, as the control plane sees them: one slot, running once started.
class OneWorker final : public NodeWorkers {
 public:
  std::vector<int> healthy() const override { return started_ ? std::vector<int>{0} : std::vector<int>{}; }
  void start_all(const NodeLease&) override { started_ = true; }
  void kill_all() override { started_ = false; }

 private:
  bool started_ = false;
};

class ReleaseAgents : public ::testing::Test {
 protected:
  std::unique_ptr<MembershipAgent> agent(const std::string& node, const std::string& version, int wire,
                                         std::chrono::milliseconds settle = 0ms) {
    MembershipAgentOptions options;
    options.job = "release";
    options.node = NodeLease{.node = node, .host = "127.0.0.1", .pid = 1, .version = version, .wire = wire, .slots = 1};
    options.node.healthy = {0};
    options.nnodes = {1, 4};
    options.timing = derive_lease_timing(600ms, std::nullopt);
    options.settle = settle;
    workers_.push_back(std::make_unique<OneWorker>());
    auto a = std::make_unique<MembershipAgent>(options, store_, *workers_.back());
    a->register_node();
    return a;
  }
  // Heartbeats and leader ticks of `agents` until `done` holds; false after 5 s.
  bool run_until(const std::vector<MembershipAgent*>& agents, const std::function<bool()>& done) {
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (std::chrono::steady_clock::now() < deadline) {
      for (MembershipAgent* a : agents) {
        a->heartbeat();
        if (a->leading()) a->lead();
      }
      if (done()) return true;
      std::this_thread::sleep_for(20ms);
    }
    return false;
  }
  // The current generation's members, by node.
  std::vector<std::string> members() {
    std::vector<std::string> nodes;
    const auto g = store_->get(keys::kGeneration);
    if (!g) return nodes;
    for (const Member& m : decode_generation(*store_->get(keys::generation(std::stoll(*g))), "gen").members) {
      nodes.push_back(m.node);
    }
    return nodes;
  }
  int refusal_events(const std::string& node) {
    int n = 0;
    for (const StreamEntry& e : store_->stream_tail(keys::kEvents, 1000)) {
      const auto type = std::find_if(e.fields.begin(), e.fields.end(), [](const auto& f) { return f.first == "type"; });
      const auto nodes = std::find_if(e.fields.begin(), e.fields.end(), [](const auto& f) { return f.first == "nodes"; });
      if (type != e.fields.end() && type->second == "node_refused" && nodes != e.fields.end() && nodes->second == node) ++n;
    }
    return n;
  }

  std::shared_ptr<MemoryStore> store_ = std::make_shared<MemoryStore>();
  std::vector<std::unique_ptr<OneWorker>> workers_;
};

// The three join within one settle window (200 ms): the refusals are committed with the generation
// that admits d, not at the ticks that wait.
TEST_F(ReleaseAgents, ANodeOfAnotherBuildIsRefusedBeforeItJoinsAndNodesOfTheJobsBuildAreAdmitted) {
  auto a = agent("a", "0.1.0", 1, 200ms);
  ASSERT_TRUE(run_until({a.get()}, [&] { return members() == std::vector<std::string>{"a"}; }));
  ASSERT_TRUE(a->leading());

  auto upgraded = agent("b", "0.2.0", 1, 200ms);  // a rolling upgrade: another release
  auto rebuilt = agent("c", "0.1.0", 2, 200ms);   // the same release, another wire
  auto same = agent("d", "0.1.0", 1, 200ms);      // the job's build
  ASSERT_TRUE(run_until({a.get(), upgraded.get(), rebuilt.get(), same.get()}, [&] {
    return upgraded->refused() && rebuilt->refused() && members() == std::vector<std::string>{"a", "d"};
  })) << "members: " << members().size();
  EXPECT_NE(upgraded->refused()->why.find("its build (hdp 0.2.0, wire 1) is not the job's (hdp 0.1.0, wire 1, node a)"),
            std::string::npos)
      << upgraded->refused()->why;
  EXPECT_NE(rebuilt->refused()->why.find("(hdp 0.1.0, wire 2)"), std::string::npos) << rebuilt->refused()->why;
  EXPECT_EQ(upgraded->refused()->by, a->member_id());
  EXPECT_FALSE(same->refused());

  // More ticks: the refused stay out, neither standing by nor announced again, and each refusal is
  // recorded once.
  auto until = std::chrono::steady_clock::now() + 1s;  // a lease and more: several heartbeats and ticks
  run_until({a.get(), upgraded.get(), rebuilt.get(), same.get()}, [&] { return std::chrono::steady_clock::now() > until; });
  EXPECT_EQ(members(), (std::vector<std::string>{"a", "d"}));
  EXPECT_EQ(store_->get(keys::kStandby).value_or(""), "");
  EXPECT_EQ(refusal_events("b"), 1);
  EXPECT_EQ(refusal_events("c"), 1);
  EXPECT_EQ(refusal_events("d"), 0);

  // The leader leaves: a refused node never contends for the lease, so d, the only node of the
  // job's build, leads.
  a->leave();
  until = std::chrono::steady_clock::now() + 1s;
  run_until({upgraded.get(), rebuilt.get(), same.get()}, [&] { return std::chrono::steady_clock::now() > until; });
  EXPECT_EQ(store_->get(keys::kLeader).value_or(""), same->member_id());
  EXPECT_FALSE(upgraded->leading());
  EXPECT_FALSE(rebuilt->leading());
  EXPECT_EQ(members(), (std::vector<std::string>{"d"}));
}

TEST_F(ReleaseAgents, WithNoLiveMemberEveryBuildIsAdmittedAndTheWorkersDecide) {
  auto a = agent("a", "0.1.0", 1);
  auto b = agent("b", "0.2.0", 1);
  ASSERT_TRUE(run_until({a.get(), b.get()}, [&] { return members().size() == 2; })) << "members: " << members().size();
  EXPECT_FALSE(a->refused());
  EXPECT_FALSE(b->refused());
}

TEST_F(ReleaseAgents, AGarbageRefusalIsIgnoredAndTheNodeStays) {
  auto a = agent("a", "0.1.0", 1);
  auto b = agent("b", "0.1.0", 1);
  ASSERT_TRUE(run_until({a.get(), b.get()}, [&] { return members().size() == 2; }));
  store_->set(keys::refusal("b", b->lease().incarnation), "refused, by hand");
  b->heartbeat();
  EXPECT_FALSE(b->refused());
  store_->set(keys::refusal("b", b->lease().incarnation),
              encode(Refusal{.why = "its build differs", .by = "a/x", .at_ms = 1}));
  b->heartbeat();
  ASSERT_TRUE(b->refused()) << "a refusal that decodes is acted on, whoever wrote it";
  EXPECT_EQ(b->refused()->why, "its build differs");
}

}  // namespace
}  // namespace hdp::elastic
