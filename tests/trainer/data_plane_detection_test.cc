// Failures seen through the data plane (docs/architecture.md, "A node's processes gone: seen
// through the data plane"), with real `hdp agent` processes, real `hdp train` workers (the tiny
// model) and a real redis-server, at an 8 s lease, so that a drop by the lease (at least 8 s less
// a heartbeat, 5.3 s, after the kill) and the data plane's (milliseconds) cannot be confused:
//   - a follower's node, agent and workers SIGKILLed together: its peers' connections end, the
//     leader finds its agent's store connection gone and publishes without it, with an
//     `agent_gone` event; bound 2.5 s from the kill to the generation without it (CI runs four
//     such tests at once on two cores; measured here 0.02 s);
//   - the leader's node killed the same way: the follower takes the leader lease over (an event
//     `leader` with `from`) and publishes, same bound (a lease-based takeover needs the leader
//     lease, 4 s, to run out first; measured 0.02 s);
//   - a reset between live ranks (`--fault reset:1@S`: rank 1 closes its connections hard, its
//     process and agent alive): the generation breaks and is republished with the same members;
//     nobody is evicted, no worker is restarted, the job goes on;
//   - a worker SIGKILLed (three times): its agent restarts it, and no live node is taken for a
//     gone one (its agent's store connection stays while its watch is woken);
//   - a node SIGSTOPped (agent and workers): its connections stay open, nothing is seen through
//     the data plane, and its lease drops it (not before 8 s less a heartbeat after the stop;
//     measured 6.0 s).
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "elastic/job_keys.h"
#include "tests/agents/agent_cluster.h"
#include "tests/support/temp_dir.h"

namespace hdp::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr auto kLease = 8000ms;
constexpr double kBoundSeconds = 2.5;

ClusterOptions options_for(const std::filesystem::path& dir, std::vector<std::string> extra = {}) {
  ClusterOptions o;
  o.lease = kLease;
  o.nnodes = "1:2";
  o.nproc = 2;
  o.train_args = tiny_trainer_args((dir / "ckpt").string(), 512, 1000, std::move(extra));
  return o;
}

std::vector<std::map<std::string, std::string>> events(AgentCluster& cluster, const std::string& type) {
  std::vector<std::map<std::string, std::string>> out;
  for (const auto& entry : cluster.store()->stream_tail(elastic::keys::kEvents, 1000)) {
    std::map<std::string, std::string> fields(entry.fields.begin(), entry.fields.end());
    if (fields["type"] == type) out.push_back(std::move(fields));
  }
  return out;
}

std::string leader_node(AgentCluster& cluster) {
  const auto leader = cluster.leader();
  return leader ? leader->substr(0, leader->rfind('/')) : std::string();
}

void signal_node(AgentCluster& cluster, const std::string& node, int signo) {
  const auto workers = cluster.worker_pids(node);
  cluster.agent(node).signal(signo);
  for (const pid_t pid : workers) ::kill(pid, signo);
}

// Signals every process of `victim` and returns the seconds until a running generation of the
// other node alone (within 60 s, else a failure).
double seconds_to_generation_without(AgentCluster& cluster, const std::string& victim, int signo) {
  const std::string survivor = victim == "n1" ? "n2" : "n1";
  const auto signalled = Clock::now();
  signal_node(cluster, victim, signo);
  const double waited = cluster.wait_for_members({survivor}, 60s);
  EXPECT_GE(waited, 0) << cluster.all_logs();
  return std::chrono::duration<double>(Clock::now() - signalled).count();
}

// A `leader` event took the leader lease over from an incarnation of `node`.
void expect_leader_lease_taken_from(AgentCluster& cluster, const std::string& node) {
  const auto leaders = events(cluster, "leader");
  EXPECT_TRUE(std::any_of(leaders.begin(), leaders.end(), [&](const auto& e) {
    return e.contains("from") && e.at("from").starts_with(node + "/");
  })) << "the lease was not taken over from the dead leader";
}

// Both nodes are in the current generation, neither was called gone nor evicted, and no agent
// registered again (which would have restarted its workers).
void expect_both_nodes_kept(AgentCluster& cluster) {
  const auto current = cluster.current();
  ASSERT_TRUE(current.has_value());
  auto nodes = node_names(*current);
  std::sort(nodes.begin(), nodes.end());
  EXPECT_EQ(nodes, (std::vector<std::string>{"n1", "n2"})) << cluster.all_logs();
  EXPECT_TRUE(events(cluster, "agent_gone").empty()) << cluster.all_logs();
  EXPECT_TRUE(events(cluster, "evict").empty()) << cluster.all_logs();
  EXPECT_EQ(cluster.all_logs().find("restarting workers"), std::string::npos) << cluster.all_logs();
}

class DataPlaneDetection : public ::testing::Test {
 protected:
  // Kills the leader's node or the other, all of its processes at once; returns the seconds from
  // the kill to a running generation of the survivor alone.
  double kill_node(bool the_leader) {
    TempDir dir("hdp-detect");
    AgentCluster cluster(options_for(dir.path()));
    start_training(cluster, {"n1", "n2"});
    expect_progress(cluster, 10, 120s);
    const std::string leader = leader_node(cluster);
    EXPECT_FALSE(leader.empty());
    const std::string victim = (leader == "n1") == the_leader ? "n1" : "n2";
    const double seconds = seconds_to_generation_without(cluster, victim, SIGKILL);
    EXPECT_LT(seconds, kBoundSeconds) << cluster.all_logs();
    const auto gone = events(cluster, "agent_gone");
    EXPECT_TRUE(std::any_of(gone.begin(), gone.end(), [&](const auto& e) { return e.at("node") == victim; }))
        << "no agent_gone event for " << victim;
    if (the_leader) expect_leader_lease_taken_from(cluster, victim);
    expect_progress(cluster, 5, 120s);  // the survivor trains on
    std::cout << (the_leader ? "leader's" : "follower's") << " node killed: generation without it "
              << seconds << " s later (lease " << kLease.count() << " ms)\n";
    return seconds;
  }
};

TEST_F(DataPlaneDetection, AFollowersNodeKilledIsDroppedWithoutWaitingForItsLease) { kill_node(false); }

TEST_F(DataPlaneDetection, ALeadersNodeKilledIsReplacedWithoutWaitingForTheLeaderLease) { kill_node(true); }

// The leader's workers die while its agent is still there, and the agent dies 300 ms later (held
// stopped meanwhile, so that the order is certain: a node's processes killed together die in no
// set order). The follower's check after the break finds the leader's agent connected, and checks
// again every 100 ms for up to a second (agent.cc, check_leader_after_break): it takes the leader
// lease over once the agent's connection is gone. Before, one check left it to the lease (8 s).
// Bound: the 0.3 s wait + kBoundSeconds.
TEST_F(DataPlaneDetection, ALeadersAgentThatDiesJustAfterItsWorkersIsStillReplacedWithoutItsLease) {
  TempDir dir("hdp-detect");
  AgentCluster cluster(options_for(dir.path()));
  start_training(cluster, {"n1", "n2"});
  expect_progress(cluster, 10, 120s);
  const std::string victim = leader_node(cluster);
  ASSERT_FALSE(victim.empty());
  const std::string survivor = victim == "n1" ? "n2" : "n1";
  const auto workers = cluster.worker_pids(victim);
  ASSERT_FALSE(workers.empty());
  const auto killed = Clock::now();
  cluster.agent(victim).signal(SIGSTOP);
  for (const pid_t pid : workers) ::kill(pid, SIGKILL);
  std::this_thread::sleep_for(300ms);
  cluster.agent(victim).signal(SIGKILL);
  ASSERT_GE(cluster.wait_for_members({survivor}, 60s), 0) << cluster.all_logs();
  const double seconds = std::chrono::duration<double>(Clock::now() - killed).count();
  EXPECT_LT(seconds, 0.3 + kBoundSeconds) << cluster.all_logs();
  expect_leader_lease_taken_from(cluster, victim);
  expect_progress(cluster, 5, 120s);
  std::cout << "leader's workers killed, its agent 0.3 s later: generation without it " << seconds
            << " s after the workers (lease " << kLease.count() << " ms)\n";
}

TEST_F(DataPlaneDetection, AResetBetweenLiveRanksEvictsNobody) {
  TempDir dir("hdp-detect");
  AgentCluster cluster(options_for(dir.path(), {"--fault", "reset:1@15"}));
  start_training(cluster, {"n1", "n2"});
  const std::int64_t before = cluster.generation();
  ASSERT_GE(cluster.wait_until([&] { return cluster.step() >= 25; }, 120s), 0) << cluster.all_logs();
  EXPECT_GT(cluster.generation(), before) << "the broken generation was republished";
  expect_both_nodes_kept(cluster);
  const std::string logs = cluster.all_logs();
  EXPECT_NE(logs.find("this rank's connections were reset"), std::string::npos) << "the fault did not fire";
  EXPECT_NE(logs.find("continuing from memory"), std::string::npos) << logs;
}

// A worker SIGKILLed on the leader's node, three times: every other rank sees its connection end
// and the follower's agent wakes its generation watch (Store::interrupt_stream_reads) while the
// leader reads the agents' store connections. The follower's must be there throughout: its node
// is never dropped (no agent_gone, no re-registration), the killed worker is restarted and the
// job goes on with both nodes. (Before, waking the watch closed the follower's connection for a
// moment, and a leader reading then took the live node for a gone one: seen in bench_recovery's
// worker_crash with the demo model, not reproduced by this job in 4 runs of the old code; the
// mechanism is asserted deterministically by redis_store_fault_test's
// AnInterruptedReadKeepsItsNamedConnection.)
TEST_F(DataPlaneDetection, AWorkerKilledDropsNoLiveNode) {
  TempDir dir("hdp-detect");
  AgentCluster cluster(options_for(dir.path()));
  start_training(cluster, {"n1", "n2"});
  expect_progress(cluster, 6, 120s);
  const std::string leader = leader_node(cluster);
  ASSERT_FALSE(leader.empty());
  for (int round = 0; round < 3; ++round) {
    const auto workers = cluster.worker_pids(leader);
    ASSERT_FALSE(workers.empty());
    ::kill(workers.back(), SIGKILL);
    expect_progress(cluster, 4, 120s);
  }
  expect_both_nodes_kept(cluster);
}

TEST_F(DataPlaneDetection, AStoppedNodeIsStillDroppedByItsLease) {
  TempDir dir("hdp-detect");
  AgentCluster cluster(options_for(dir.path()));
  start_training(cluster, {"n1", "n2"});
  expect_progress(cluster, 10, 120s);
  const std::string victim = leader_node(cluster) == "n1" ? "n2" : "n1";
  const double seconds = seconds_to_generation_without(cluster, victim, SIGSTOP);
  signal_node(cluster, victim, SIGCONT);
  // Renewed at most a heartbeat (lease/3) before the stop, the lease ran out no sooner than this.
  EXPECT_GE(seconds, std::chrono::duration<double>(kLease).count() * 2 / 3 - 0.1) << cluster.all_logs();
  EXPECT_TRUE(events(cluster, "agent_gone").empty()) << "a stopped process was taken for a dead one";
  std::cout << "node stopped: generation without it " << seconds << " s later (lease " << kLease.count() << " ms)\n";
}

}  // namespace
}  // namespace hdp::test
