// Issue 13, defects 1 and 2, with real agents and smoke workers on a private redis-server:
// membership converges to "every live, healthy agent is a member" whatever dropped a live node
// (a lease value overwritten, a generation published without anyone), and a re-registration that
// failed part way (`joins` of another type at that moment) is completed once the store allows.
// Bounds: lease (2 s) + settle (0.3 s) + 1 s from the fault's end, which hold with 4 tests at once
// on 2 cores (the path is one heartbeat, lease/3, then a leader tick and the settle window).
#include <signal.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

#include "elastic/job_keys.h"
#include "tests/agents/agent_cluster.h"

namespace hdp::test {
namespace {

using namespace std::chrono_literals;

// The smoke workers' rendezvous timeout: 10 s rather than the fixture's 3 s. Under the sanitizer
// build with four tests at once on two cores a worker takes up to 7 s from exec to its first
// rendezvous, and one that came later than its peers' timeout got its node evicted as hung before
// the test began. The bounds below are the agents' (membership), not the workers'.
ClusterOptions rejoin_options() {
  ClusterOptions o;
  o.worker_timeout = std::chrono::seconds(10);
  return o;
}

double bound_s(const AgentCluster& cluster) {
  return (cluster.options().lease + cluster.options().settle + 1s).count() / 1000.0;
}



std::string non_leader(AgentCluster& cluster, const std::vector<std::string>& nodes) {
  const std::string leader = cluster.leader().value_or("");
  for (const auto& node : nodes) {
    if (!leader.starts_with(node + "/")) return node;
  }
  return nodes.back();
}

std::string incarnation_of(const elastic::Generation& generation, const std::string& node) {
  for (const auto& m : generation.members) {
    if (m.node == node) return m.incarnation;
  }
  return "";
}

// The leader drops a member whose lease value does not decode; the agent, alive all along, must
// repair its lease and be admitted again (before the fix it renewed its lease forever and waited,
// "generation N is without this worker").
TEST(MembershipRejoin, AMemberDroppedWhileAliveIsAdmittedAgain) {
  AgentCluster cluster(rejoin_options());
  const std::vector<std::string> nodes = {"n1", "n2", "n3"};
  ASSERT_NO_FATAL_FAILURE(start_training(cluster, nodes));
  const std::string victim = non_leader(cluster, nodes);
  const std::string incarnation = incarnation_of(cluster.current().value(), victim);
  std::vector<std::string> others = nodes;
  std::erase(others, victim);
  // Written again until the leader drops the member: the agent rewrites its lease whenever it
  // sees a new generation, and under load that rewrite can land before the leader's next read.
  bool left = false;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!left && std::chrono::steady_clock::now() < deadline) {
    cluster.store()->set_with_ttl(elastic::keys::lease(victim, incarnation), "garbage", cluster.options().lease);
    left = cluster.wait_for_members(others, 500ms) >= 0;
  }
  ASSERT_TRUE(left) << cluster.all_logs();
  const std::int64_t dropped = cluster.generation();
  const double back = cluster.wait_for_members(nodes, 15s);
  ASSERT_GE(back, 0) << "the live node " << victim << " was never admitted again\n" << cluster.all_logs();
  EXPECT_LE(back, bound_s(cluster)) << cluster.all_logs();
  EXPECT_GT(cluster.generation(), dropped);
  EXPECT_EQ(incarnation_of(cluster.current().value(), victim), incarnation);  // the same incarnation
  expect_progress(cluster, 20, 10s);
}

// A generation published with no members while every agent is alive (as a leader that lost its
// view of `gen` once did: "published generation 2: 0 node(s)"): every agent must be admitted again.
TEST(MembershipRejoin, AGenerationWithoutAnyoneIsFollowedByOneWithEveryLiveAgent) {
  AgentCluster cluster(rejoin_options());
  const std::vector<std::string> nodes = {"n1", "n2", "n3"};
  ASSERT_NO_FATAL_FAILURE(start_training(cluster, nodes));
  const elastic::Generation current = cluster.current().value();
  elastic::Generation empty;
  empty.number = current.number + 1;
  empty.status = elastic::GenerationStatus::kWaiting;
  empty.joins_seen = current.joins_seen;
  empty.created_ms = current.created_ms;
  elastic::Transaction forge;
  forge.require(elastic::keys::kGeneration, std::to_string(current.number))
      .add(elastic::Write::set(elastic::keys::kGeneration, std::to_string(empty.number)))
      .add(elastic::Write::set(elastic::keys::generation(empty.number), elastic::encode(empty)));
  ASSERT_TRUE(cluster.store()->commit(forge));

  const double back = cluster.wait_for_members(nodes, 15s);
  ASSERT_GE(back, 0) << "live agents were never admitted again\n" << cluster.all_logs();
  EXPECT_LE(back, bound_s(cluster)) << cluster.all_logs();
  EXPECT_GT(cluster.generation(), empty.number);
  expect_progress(cluster, 20, 10s);
}

// An evicted agent re-registers while `joins` holds a hash: the claim and lease go through, the
// announcement fails. Once `joins` is a counter again, the registration must be completed (the same
// incarnation, announced) and its workers started; before the fix the error was swallowed and the
// node, its new lease renewed forever, never started workers or rejoined.
TEST(MembershipRejoin, AReRegistrationThatFailedPartWayIsCompleted) {
  AgentCluster cluster(rejoin_options());
  const std::vector<std::string> nodes = {"n1", "n2", "n3"};
  ASSERT_NO_FATAL_FAILURE(start_training(cluster, nodes));
  const std::string victim = non_leader(cluster, nodes);
  auto store = cluster.store();
  const std::string joins = store->get(elastic::keys::kJoinCount).value();
  store->erase(elastic::keys::kJoinCount);
  ASSERT_TRUE(store->commit(elastic::Transaction{}.add(elastic::Write::hash_set(elastic::keys::kJoinCount, {{"x", "1"}}))));

  // Evict the victim: paused past its lease.
  cluster.agent(victim).signal(SIGSTOP);
  std::vector<std::string> others = nodes;
  std::erase(others, victim);
  const bool evicted = cluster.wait_for_members(others, 10s) >= 0;
  cluster.agent(victim).signal(SIGCONT);
  ASSERT_TRUE(evicted) << cluster.all_logs();
  // Its re-registration claims the node id anew and then fails on `joins`.
  ASSERT_GE(cluster.wait_until([&] { return cluster.agent_log(victim).find("was lost (evicted)") != std::string::npos; },
                               5s),
            0)
      << cluster.agent_log(victim);
  ASSERT_GE(cluster.wait_until([&] { return cluster.agent_log(victim).find("heartbeat skipped") != std::string::npos; }, 5s), 0)
      << cluster.agent_log(victim);
  std::this_thread::sleep_for(cluster.options().lease);  // several heartbeats with `joins` still a hash

  store->erase(elastic::keys::kJoinCount);
  store->set(elastic::keys::kJoinCount, joins);
  const double back = cluster.wait_for_members(nodes, 15s);
  ASSERT_GE(back, 0) << victim << " never rejoined\n" << cluster.all_logs();
  EXPECT_LE(back, bound_s(cluster)) << cluster.all_logs();
  EXPECT_NE(cluster.agent_log(victim).find("re-registered as incarnation"), std::string::npos) << cluster.agent_log(victim);
  expect_progress(cluster, 20, 10s);
}

}  // namespace
}  // namespace hdp::test
