// Values no agent wrote, put into a running job's keys by hand (issue 13, defects 3-5), with real
// agents and smoke workers on a private redis-server (lease 2 s). Runs SERIAL: its bounds (a new
// generation within lease + 1 s of a kill) are stated for a machine not running other tests.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <thread>

#include "elastic/job_keys.h"
#include "elastic/leader_lease.h"
#include "elastic/membership.h"
#include "tests/agents/agent_cluster.h"
#include "tests/support/child_process.h"

namespace hdp::test {
namespace {

using namespace std::chrono_literals;

// A smoke worker that exits (for any reason but a drain) is logged by its agent as "(pid N) failed"
// or "ended".
bool some_worker_exited(const AgentCluster& cluster) {
  const std::string logs = cluster.all_logs();
  return logs.find(") failed") != std::string::npos || logs.find(") ended") != std::string::npos;
}

// Kills a node that does not hold the leader lease; returns it.
std::string kill_a_follower(AgentCluster& cluster, const std::vector<std::string>& nodes) {
  const std::string leader = cluster.leader().value_or("");
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    if (!leader.starts_with(*it + "/")) {
      cluster.agent(*it).kill();
      return *it;
    }
  }
  return "";
}

// Defects 3 and 4: `gen` held garbage, then 2^63 - 1, for 1.5 s each, then its value again; then a
// node is killed. Before: every worker exited 2 on the first bad read (3 restarts in 2 s, then the
// agents gave up), and the agents remembered 2^63 - 1 so that the leader published generation
// -2^63 when the node died.
TEST(BadValues, GarbageAndInt64MaxInGenCostNoWorkerAndTheNextGenerationIsInRange) {
  AgentCluster cluster({.nproc = 1});
  const std::vector<std::string> nodes = {"n1", "n2", "n3"};
  for (const auto& node : nodes) cluster.start_agent(node);
  ASSERT_GE(cluster.wait_for_members(nodes, 15s), 0) << cluster.all_logs();
  ASSERT_GE(cluster.wait_until([&] { return cluster.step() >= 10; }, 10s), 0) << cluster.all_logs();

  auto store = cluster.store();
  const std::string good = store->get(elastic::keys::kGeneration).value();
  store->set(elastic::keys::kGeneration, "banana");
  std::this_thread::sleep_for(1500ms);
  store->set(elastic::keys::kGeneration, std::to_string(std::numeric_limits<std::int64_t>::max()));
  std::this_thread::sleep_for(1500ms);
  store->set(elastic::keys::kGeneration, good);

  const std::string victim = kill_a_follower(cluster, nodes);
  std::vector<std::string> survivors = nodes;
  std::erase(survivors, victim);
  const double left = cluster.wait_for_members(survivors, 10s);
  ASSERT_GE(left, 0) << cluster.all_logs();
  EXPECT_LE(left, (cluster.options().lease + 1s).count() / 1000.0);
  const std::int64_t next = elastic::decode_generation_number(store->get(elastic::keys::kGeneration).value(), "gen");
  EXPECT_GT(next, std::stoll(good));
  EXPECT_LE(next, std::stoll(good) + 5) << "the numbering jumped";
  for (const auto& node : survivors) EXPECT_TRUE(cluster.agent(node).running()) << node << "\n" << cluster.all_logs();
  EXPECT_FALSE(some_worker_exited(cluster)) << cluster.all_logs();
  const std::int64_t from = cluster.step();
  EXPECT_GE(cluster.wait_until([&] { return cluster.step() >= from + 20; }, 5s), 0) << cluster.all_logs();
  // Each bad value was reported, naming the key.
  EXPECT_NE(cluster.all_logs().find("'gen': 'banana' is not an integer"), std::string::npos) << cluster.all_logs();
}

// Three nodes; a follower killed, then `spoil` puts a value no agent wrote into `leader`: the
// survivors are the next generation within lease + 1 s, a leader id of the right form holds the
// key again within lease + 1 s of the spoiling (the bad value is replaced once the leader TTL,
// lease/2, has passed), and no worker exited. Returns every agent's log. The generation can come
// first: the killed node's peers see its connections reset and the leader need not wait for its
// lease, so the key is awaited rather than read once.
std::string leader_spoiled_while_a_node_dies(const std::function<void(AgentCluster&)>& spoil) {
  AgentCluster cluster({.nproc = 1});
  const std::vector<std::string> nodes = {"n1", "n2", "n3"};
  for (const auto& node : nodes) cluster.start_agent(node);
  EXPECT_GE(cluster.wait_for_members(nodes, 15s), 0) << cluster.all_logs();
  const std::string victim = kill_a_follower(cluster, nodes);
  const auto spoiled = std::chrono::steady_clock::now();
  spoil(cluster);
  std::vector<std::string> survivors = nodes;
  std::erase(survivors, victim);
  const double left = cluster.wait_for_members(survivors, 10s);
  EXPECT_GE(left, 0) << cluster.all_logs();
  EXPECT_LE(left, (cluster.options().lease + 1s).count() / 1000.0);
  // wait_until treats the store's WRONGTYPE answer (a list still in the key) as "not yet".
  EXPECT_GE(cluster.wait_until([&] { return elastic::is_leader_id(cluster.leader().value_or("")); }, 10s), 0)
      << cluster.all_logs();
  EXPECT_LE(std::chrono::duration<double>(std::chrono::steady_clock::now() - spoiled).count(),
            (cluster.options().lease + 1s).count() / 1000.0)
      << "the leader key was not replaced within lease + 1 s";
  EXPECT_FALSE(some_worker_exited(cluster)) << cluster.all_logs();
  return cluster.all_logs();
}

// Defect 5: garbage with no TTL in `leader`, then a node killed. Before: the leader lost its lease
// to the garbage, no follower contended (a holder existed), nothing was logged, and membership kept
// the dead node forever. Now the garbage is replaced after the leader TTL (lease/2) and the
// generation without the dead node follows within lease + 1 s of the kill.
TEST(BadValues, GarbageInTheLeaderKeyIsLoggedAndReplacedAndMembershipGoesOn) {
  const std::string logs = leader_spoiled_while_a_node_dies(
      [](AgentCluster& cluster) { cluster.store()->set(elastic::keys::kLeader, "garbage-leader"); });
  EXPECT_NE(logs.find("'leader' holds 'garbage-leader'"), std::string::npos) << logs;
}

// A value of another type in `leader` (a list, written with redis-cli): logged once per agent,
// naming the key, and replaced as a garbage string is.
TEST(BadValues, AListInTheLeaderKeyIsNamedAndReplacedAndMembershipGoesOn) {
  std::string key;
  const std::string logs = leader_spoiled_while_a_node_dies([&](AgentCluster& cluster) {
    key = "hdp:" + cluster.job() + ":" + elastic::keys::kLeader;
    const CommandResult written = run_command(
        {"redis-cli", "-p", std::to_string(cluster.redis().port()), "eval",
         "redis.call('del', KEYS[1]); return redis.call('rpush', KEYS[1], 'x', 'y')", "1", key},
        {}, 10s);
    EXPECT_EQ(written.exit_code, 0) << written.err;
    EXPECT_EQ(written.out, "2\n") << written.out << written.err;
  });
  EXPECT_NE(logs.find("'" + key + "' holds a list"), std::string::npos) << logs;
}

// The state hash deleted by hand while the job runs (smoke workers, which write no state): the
// leader puts the current generation's fields back at its next check, a heartbeat (lease/3)
// apart; `hdp status` and the dashboard have them again. Bound: a heartbeat, a tick, and 1 s for
// load.
TEST(BadValues, ADeletedStateHashGetsItsGenerationFieldsBackWithinAHeartbeat) {
  AgentCluster cluster({.nproc = 1});
  const std::vector<std::string> nodes = {"n1", "n2"};
  for (const auto& node : nodes) cluster.start_agent(node);
  ASSERT_GE(cluster.wait_for_members(nodes, 15s), 0) << cluster.all_logs();
  const std::string generation = std::to_string(cluster.generation());
  ASSERT_TRUE(cluster.store()->erase(elastic::keys::kState));
  const double back = cluster.wait_until(
      [&] {
        auto state = cluster.state();
        return state["status"] == "running" && state["generation"] == generation && state["world_size"] == "2" &&
               state["nodes"] == "2";
      },
      10s);
  ASSERT_GE(back, 0) << "state: status '" << cluster.state()["status"] << "', generation '"
                     << cluster.state()["generation"] << "'\n"
                     << cluster.all_logs();
  EXPECT_LE(back, (cluster.options().lease / 3 + 1200ms).count() / 1000.0);
  EXPECT_NE(cluster.all_logs().find("lacks 5 field(s) of generation " + generation), std::string::npos)
      << cluster.all_logs();
  EXPECT_FALSE(some_worker_exited(cluster)) << cluster.all_logs();
}

}  // namespace
}  // namespace hdp::test
