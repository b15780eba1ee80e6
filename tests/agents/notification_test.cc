// How a new generation reaches the workers (docs/architecture.md, "How a generation reaches the
// workers"), with real `hdp agent` processes, smoke workers and redis-server: the workers never
// read `gen` from Redis, the follower agents wait in a blocking read of the `generations` stream
// rather than polling, and a job that only trains holds about one Redis connection per node.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>
#include <thread>

#include "elastic/redis_store.h"
#include "tests/agents/agent_cluster.h"
#include "tests/support/child_process.h"

namespace hdp::test {
namespace {

using namespace std::chrono_literals;

// One INFO section's numeric field, e.g. field(info("clients"), "connected_clients").
double info_field(const std::string& info, const std::string& name) {
  const auto pos = info.find("\n" + name + ":");
  if (pos == std::string::npos) return 0;
  return std::stod(info.substr(pos + name.size() + 2));
}

// MONITOR lines that contain `command` and were sent by a client (not run by a script: a fenced
// commit's Lua reads `gen` to check its condition, which is no watching).
int client_commands(const std::string& monitor, const std::string& command) {
  int n = 0;
  std::istringstream lines(monitor);
  for (std::string line; std::getline(lines, line);) {
    if (line.find(command) != std::string::npos && line.find("[0 lua]") == std::string::npos) ++n;
  }
  return n;
}

// Three nodes of two smoke workers each. Steady state: over 3 s of training (redis-cli MONITOR),
// no client's GET of `gen` at all (a worker that read `gen` to watch did at least 5 a second: 90
// here; the agents read it with MGET in their heartbeat, the leader in its tick); the two follower agents sit
// in XREAD BLOCK (Redis's blocked_clients reaches 2); after the workers' idle connections closed
// (10 s), the job holds at most nodes + 2 connections (its agents, rank 0 which commits progress,
// and this test's observer). Then a node is killed: the new generation reaches the survivors
// through their agents and the job goes on.
TEST(Notification, WorkersLearnGenerationsFromTheirAgentsAndLeaveRedisAlone) {
  AgentCluster cluster(ClusterOptions{.lease = 2000ms, .nproc = 2, .step_ms = 20});
  start_training(cluster, {"a", "b", "c"});
  elastic::RedisStore observer(elastic::parse_redis_url(cluster.redis().url()));
  auto info = [&](const char* section) { return observer.command({"INFO", section}, true).str; };

  std::this_thread::sleep_for(11s);  // the workers' idle connections close after 10 s
  const CommandResult monitor =
      run_command({"timeout", "3", "redis-cli", "-p", std::to_string(cluster.redis().port()), "monitor"}, {}, 10s);
  ASSERT_NE(monitor.out.find("\"PEXPIRE\""), std::string::npos) << "MONITOR saw no heartbeat: " << monitor.out << monitor.err;
  EXPECT_EQ(client_commands(monitor.out, "\"GET\" \"hdp:" + cluster.job() + ":gen\""), 0)
      << "a worker read `gen` from Redis:\n" << monitor.out.substr(0, 3000);
  double blocked = 0, connections = 1e9;
  for (int i = 0; i < 30; ++i) {
    const std::string clients = info("clients");
    blocked = std::max(blocked, info_field(clients, "blocked_clients"));
    connections = std::min(connections, info_field(clients, "connected_clients"));
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(blocked, 2) << "the two follower agents block on the generations stream";
  EXPECT_LE(connections, 3 + 2) << "3 agents, rank 0 and the observer";
  EXPECT_GE(connections, 3);

  // A node dies: the survivors' agents are told, and tell their workers.
  const std::int64_t before = cluster.generation();
  const std::string leader = cluster.leader().value_or("");
  const std::string victim = leader.rfind("c/", 0) == 0 ? "b" : "c";  // a follower
  cluster.agent(victim).kill();
  for (pid_t pid : cluster.worker_pids(victim)) ::kill(pid, SIGKILL);
  std::vector<std::string> survivors{"a", "b", "c"};
  std::erase(survivors, victim);
  ASSERT_GE(cluster.wait_for_members(survivors, 15s), 0) << cluster.all_logs();
  EXPECT_GT(cluster.generation(), before);
  expect_progress(cluster, 20, 20s);
}

// A follower's watch of the generations stream is idle only while its heartbeat uses the
// connection: a read whose grant ran out (a margin before the heartbeat, which covers Redis's
// coarse timeout of a blocking read) brings the heartbeat forward. Before, the watch sat idle
// for the whole margin, 100 ms of every 1,667 ms heartbeat at a 5 s lease (6%), and a generation
// published then reached the node's workers only at the heartbeat. Sampled with CLIENT LIST
// (flags `b`: blocked) every ~5 ms for 8 s: each follower's connection is blocked in at least 96%
// of the samples (a heartbeat is a few commands: well under 1% of the interval on a quiet machine,
// and one slowed to 67 ms by a loaded machine costs 4% of its interval, under 1% of the 8 s).
TEST(Notification, AFollowersWatchIsIdleOnlyForItsHeartbeat) {
  AgentCluster cluster(ClusterOptions{.lease = 5000ms, .nproc = 1, .step_ms = 20});
  start_training(cluster, {"a", "b", "c"});
  expect_progress(cluster, 5, 20s);
  const std::string leader = cluster.leader().value_or("");
  ASSERT_FALSE(leader.empty());
  elastic::RedisStore observer(elastic::parse_redis_url(cluster.redis().url()));
  const std::string prefix = "name=hdp-agent:" + cluster.job() + ":";
  std::map<std::string, std::pair<int, int>> samples;  // node -> (blocked, all)
  const auto end = std::chrono::steady_clock::now() + 8s;  // about 5 heartbeats per follower
  while (std::chrono::steady_clock::now() < end) {
    std::istringstream lines(observer.command({"CLIENT", "LIST"}, true).str);
    for (std::string line; std::getline(lines, line);) {
      const auto at = line.find(prefix);
      if (at == std::string::npos) continue;
      const std::string node = line.substr(at + prefix.size(), line.find(':', at + prefix.size()) - at - prefix.size());
      const auto flags = line.find(" flags=");
      const bool blocked = flags != std::string::npos && line.substr(flags + 7, line.find(' ', flags + 7) - flags - 7).find('b') != std::string::npos;
      auto& [b, all] = samples[node];
      b += blocked ? 1 : 0;
      ++all;
    }
    std::this_thread::sleep_for(5ms);
  }
  int followers = 0;
  for (const auto& [node, counts] : samples) {
    if (leader.rfind(node + "/", 0) == 0) continue;  // the leader reads `gen` every tick instead
    ++followers;
    const auto [blocked, all] = counts;
    ASSERT_GE(all, 200) << node;
    std::printf("follower %s: its watch blocked in %d of %d samples\n", node.c_str(), blocked, all);
    EXPECT_GE(static_cast<double>(blocked) / all, 0.96)
        << "node " << node << "'s watch was blocked in " << blocked << " of " << all << " samples";
  }
  EXPECT_EQ(followers, 2) << cluster.all_logs();
}

}  // namespace
}  // namespace hdp::test
