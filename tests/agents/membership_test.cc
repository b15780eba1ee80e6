// Agents and smoke workers as real processes on a real redis-server: nodes killed, added, paused
// past their lease, workers crashing, Redis restarting. Bounds are stated per test.
#include <signal.h>
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "elastic/job_keys.h"
#include "elastic/release.h"
#include "tests/agents/agent_cluster.h"

namespace hdp::test {
namespace {

using namespace std::chrono_literals;

// A wrong all-reduce sum makes a smoke worker exit 3, which its agent logs.
void expect_exact_sums(const AgentCluster& cluster) {
  const std::string logs = cluster.all_logs();
  EXPECT_EQ(logs.find("expected"), std::string::npos) << "a smoke worker saw a wrong sum:\n" << logs;
  EXPECT_EQ(logs.find("reports the job failed"), std::string::npos) << logs;
}



TEST(Membership, KilledAgentLeavesWithinLeasePlusOneSecondThenAFifthJoinsAndALeaderDiesCleanly) {
  AgentCluster cluster;
  for (const char* node : {"n1", "n2", "n3", "n4"}) cluster.start_agent(node);
  ASSERT_GE(cluster.wait_for_members({"n1", "n2", "n3", "n4"}, 15s), 0) << cluster.all_logs();
  EXPECT_EQ(cluster.current()->world_size(), 8);
  expect_progress(cluster, 20, 10s);

  // kill -9 a node that is not the leader: the generation without it must follow within lease + 1 s.
  const std::string leader = cluster.leader().value_or("");
  const std::string victim = leader.starts_with("n4/") ? "n3" : "n4";
  const std::int64_t before = cluster.generation();
  cluster.agent(victim).kill();
  std::vector<std::string> survivors = {"n1", "n2", "n3", "n4"};
  std::erase(survivors, victim);
  const double left = cluster.wait_for_members(survivors, 10s);
  ASSERT_GE(left, 0) << cluster.all_logs();
  EXPECT_LE(left, (cluster.options().lease + 1s).count() / 1000.0);
  EXPECT_GT(cluster.generation(), before);
  EXPECT_EQ(cluster.current()->world_size(), 6);
  // Training resumes at once: 20 steps of 20 ms within 2 s of the new generation (a bootstrap still
  // waiting for the dead node's workers gives up when the generation is superseded, instead of
  // sitting out its 3 s connect timeout).
  expect_progress(cluster, 20, 2s);

  // A fifth node joins the next generation.
  cluster.start_agent("n5");
  survivors.push_back("n5");
  ASSERT_GE(cluster.wait_for_members(survivors, 10s), 0) << cluster.all_logs();
  EXPECT_EQ(cluster.current()->world_size(), 8);
  expect_progress(cluster, 20, 10s);

  // kill -9 the leader: another agent holds the lease within one lease, and the dead node leaves.
  const std::string old_leader = cluster.leader().value();
  const std::string leader_node = old_leader.substr(0, old_leader.find('/'));
  cluster.agent(leader_node).kill();
  const double takeover =
      cluster.wait_until([&] { return cluster.leader().value_or(old_leader) != old_leader; }, 10s);
  ASSERT_GE(takeover, 0);
  EXPECT_LE(takeover, cluster.options().lease.count() / 1000.0);
  std::erase(survivors, leader_node);
  ASSERT_GE(cluster.wait_for_members(survivors, 10s), 0) << cluster.all_logs();
  expect_progress(cluster, 20, 10s);
  expect_exact_sums(cluster);
}

TEST(Membership, KilledWorkerIsRestartedAndRejoins) {
  AgentCluster cluster;
  ASSERT_NO_FATAL_FAILURE(start_training(cluster, {"n1", "n2"}));
  // The worker of slot 1 on n2: the child of n2's agent whose environment says HDP_LOCAL_RANK=1.
  const std::int64_t before = cluster.generation();
  const std::string log_before = cluster.agent_log("n2");
  const auto pos = log_before.find("worker 1 started (pid ");
  ASSERT_NE(pos, std::string::npos) << log_before;
  const pid_t worker = std::stoi(log_before.substr(pos + 22));
  ASSERT_EQ(kill(worker, SIGKILL), 0);
  // The agent restarts it (at once: a slot's first restart has no backoff); its peers mark the
  // generation broken, and a newer generation with all four slots follows (the restarted worker
  // in it).
  ASSERT_GE(cluster.wait_until([&] { return cluster.agent_log("n2").find("restart 1/3") != std::string::npos; }, 5s), 0)
      << cluster.agent_log("n2");
  ASSERT_GE(cluster.wait_until(
                [&] {
                  auto g = cluster.current();
                  return g && g->number > before && g->world_size() == 4 &&
                         g->status == elastic::GenerationStatus::kRunning;
                },
                15s),
            0)
      << cluster.all_logs();
  expect_progress(cluster, 20, 10s);
  expect_exact_sums(cluster);
}

TEST(Membership, AgentPausedPastItsLeaseIsEvictedAndRejoinsAsANewMember) {
  AgentCluster cluster;
  ASSERT_NO_FATAL_FAILURE(start_training(cluster, {"n1", "n2", "n3"}));
  // Pause a node that is not the leader.
  const std::string leader = cluster.leader().value_or("");
  const std::string paused = leader.starts_with("n3/") ? "n2" : "n3";
  std::string old_incarnation;
  const auto before_pause = cluster.current().value();
  for (const auto& m : before_pause.members) {
    if (m.node == paused) old_incarnation = m.incarnation;
  }
  cluster.agent(paused).signal(SIGSTOP);
  std::vector<std::string> others = {"n1", "n2", "n3"};
  std::erase(others, paused);
  const double evicted = cluster.wait_for_members(others, 10s);
  ASSERT_GE(evicted, 0) << cluster.all_logs();
  EXPECT_LE(evicted, (cluster.options().lease + 1s).count() / 1000.0);
  const std::int64_t eviction_generation = cluster.generation();
  expect_progress(cluster, 10, 10s);
  cluster.agent(paused).signal(SIGCONT);

  // It notices at its next heartbeat, registers a new incarnation and is admitted again.
  ASSERT_GE(cluster.wait_for_members({"n1", "n2", "n3"}, 10s), 0) << cluster.all_logs();
  const auto back = cluster.current().value();
  EXPECT_GT(back.number, eviction_generation);
  for (const auto& m : back.members) {
    if (m.node == paused) {
      EXPECT_NE(m.incarnation, old_incarnation);
    }
  }
  EXPECT_NE(cluster.agent_log(paused).find("was lost (evicted)"), std::string::npos) << cluster.agent_log(paused);
  // Fencing, checked in Redis: the state names the current generation, and a write fenced by the
  // generation the paused node was last part of is refused.
  EXPECT_EQ(cluster.state()["generation"], std::to_string(back.number));
  auto store = cluster.store();
  elastic::Transaction stale;
  stale.require(elastic::keys::kGeneration, std::to_string(eviction_generation - 1))
      .add(elastic::Write::hash_set(elastic::keys::kState, {{"step", "0"}}));
  EXPECT_FALSE(store->commit(stale));
  expect_progress(cluster, 10, 10s);
  expect_exact_sums(cluster);
}

// A whole node frozen (its agent and its workers SIGSTOPped, as a hung host or a cut link would
// leave them): the survivors are blocked in an all-reduce with its workers, whose timeout is 10 s
// here. The generation without it is published within lease + 1 s, which aborts the survivors'
// communicator (trainer/elastic_loop.h): training must be reported again within lease + 1 s of
// the freeze, plus 0.5 s for the new generation's bootstrap and the next step report (every 10
// steps of 20 ms).
TEST(Membership, AFrozenNodeCostsTheSurvivorsAboutALeaseNotTheCollectiveTimeout) {
  AgentCluster cluster({.worker_timeout = 10s});
  ASSERT_NO_FATAL_FAILURE(start_training(cluster, {"n1", "n2", "n3"}));
  const std::string leader = cluster.leader().value_or("");
  const std::string frozen = leader.starts_with("n3/") ? "n2" : "n3";
  std::vector<pid_t> pids{cluster.agent(frozen).pid()};
  const std::string log = cluster.agent_log(frozen);
  for (const char* slot : {"worker 0 started (pid ", "worker 1 started (pid "}) {
    const auto at = log.rfind(slot);
    ASSERT_NE(at, std::string::npos) << log;
    pids.push_back(std::stoi(log.substr(at + std::strlen(slot))));
  }
  for (pid_t pid : pids) ASSERT_EQ(kill(pid, SIGSTOP), 0);
  const std::int64_t frozen_at = cluster.step();
  const double resumed = cluster.wait_until([&] { return cluster.step() > frozen_at + 10; }, 20s);
  for (pid_t pid : pids) kill(pid, SIGCONT);
  std::printf("training reported again %.2f s after the freeze\n", resumed);
  ASSERT_GE(resumed, 0) << cluster.all_logs();
  EXPECT_LE(resumed, (cluster.options().lease + 1500ms).count() / 1000.0) << cluster.all_logs();
  expect_exact_sums(cluster);
}

// Issue 13, defect 14: a Redis restart without persistence loses every key, but the agents keep
// their incarnations and their workers (which move to the next generation without a restart); the
// first generation afterwards is numbered above every earlier one (the leases remember them).
TEST(Membership, RedisRestartMidRunIsRiddenOutWithoutRestartingWorkers) {
  AgentCluster cluster;
  ASSERT_NO_FATAL_FAILURE(start_training(cluster, {"n1", "n2"}));
  const std::int64_t before = cluster.generation();
  const elastic::Generation members_before = cluster.current().value();
  cluster.redis().restart();  // SIGKILL; a fresh, empty server on the same port
  ASSERT_GE(cluster.wait_until([&] { return cluster.generation() > before; }, 20s), 0) << cluster.all_logs();
  ASSERT_GE(cluster.wait_for_members({"n1", "n2"}, 20s), 0) << cluster.all_logs();
  const elastic::Generation members_after = cluster.current().value();
  EXPECT_GT(members_after.number, before);
  for (const auto& member : members_before.members) {
    const auto same = std::find_if(members_after.members.begin(), members_after.members.end(),
                                   [&](const elastic::Member& m) { return m.same_identity(member); });
    EXPECT_NE(same, members_after.members.end()) << member.node << " came back as another incarnation\n"
                                                 << cluster.all_logs();
  }
  expect_progress(cluster, 10, 15s);
  EXPECT_TRUE(cluster.agent("n1").running());
  EXPECT_TRUE(cluster.agent("n2").running());
  EXPECT_EQ(cluster.all_logs().find("restarting workers"), std::string::npos) << cluster.all_logs();
  expect_exact_sums(cluster);
}

TEST(Membership, BelowMinNodesTheJobWaits) {
  AgentCluster cluster({.nnodes = "3:4"});
  cluster.start_agent("n1");
  cluster.start_agent("n2");
  ASSERT_GE(cluster.wait_until([&] { return cluster.state()["status"] == "waiting"; }, 10s), 0) << cluster.all_logs();
  std::this_thread::sleep_for(500ms);
  EXPECT_EQ(cluster.step(), 0);  // nobody trains while waiting
  cluster.start_agent("n3");
  ASSERT_GE(cluster.wait_for_members({"n1", "n2", "n3"}, 10s), 0) << cluster.all_logs();
  EXPECT_EQ(cluster.state()["status"], "running");
  expect_progress(cluster, 10, 10s);
}

TEST(Membership, JobCompletesAndEveryAgentExitsZero) {
  AgentCluster cluster({.steps = 60});
  cluster.start_agent("n1");
  cluster.start_agent("n2");
  for (const char* node : {"n1", "n2"}) {
    auto status = cluster.agent(node).wait_for(30s);
    ASSERT_TRUE(status.has_value()) << cluster.all_logs();
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << node << ": " << *status << "\n" << cluster.all_logs();
  }
  EXPECT_EQ(cluster.state()["status"], "completed");
  EXPECT_EQ(cluster.state()["step"], "60");
}

TEST(Membership, SigtermDrainsDeregistersAndExitsFour) {
  AgentCluster cluster;
  cluster.start_agent("n1");
  cluster.start_agent("n2");
  ASSERT_GE(cluster.wait_for_members({"n1", "n2"}, 15s), 0) << cluster.all_logs();
  cluster.agent("n2").signal(SIGTERM);
  auto status = cluster.agent("n2").wait_for(10s);
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 4) << *status;
  EXPECT_EQ(cluster.get(elastic::keys::node("n2")), std::nullopt);  // deregistered at once, not by expiry
  ASSERT_GE(cluster.wait_for_members({"n1"}, 5s), 0) << cluster.all_logs();
}

// A node the leader refused (elastic/release.h: another build than the job's members) stops its
// workers, leaves and exits 5 within a heartbeat or two; the job goes on without it. The refusal
// is written here as the leader writes it, since a process of another build cannot be started
// from this one (tests/elastic/release_test.cc has the leader write it); a refusal that does not
// decode is ignored, and the node stays.
TEST(Membership, ANodeRefusedByTheLeaderStopsItsWorkersLeavesAndExitsFive) {
  AgentCluster cluster;
  cluster.start_agent("n1");
  cluster.start_agent("n2");
  ASSERT_GE(cluster.wait_for_members({"n1", "n2"}, 15s), 0) << cluster.all_logs();
  std::string incarnation;
  const std::optional<elastic::Generation> generation = cluster.current();
  ASSERT_TRUE(generation.has_value());
  for (const auto& m : generation->members) {
    if (m.node == "n2") incarnation = m.incarnation;
  }
  const std::vector<pid_t> workers = cluster.worker_pids("n2");
  ASSERT_EQ(workers.size(), 2u);
  auto store = cluster.store();
  store->set_with_ttl(elastic::keys::refusal("n2", incarnation), "garbage", 60s);
  std::this_thread::sleep_for(cluster.options().lease);  // three heartbeats
  ASSERT_FALSE(cluster.agent("n2").wait_for(0ms).has_value()) << "a garbage refusal was acted on\n" << cluster.all_logs();
  EXPECT_NE(cluster.agent_log("n2").find("ignoring a refusal: invalid value in Redis key"), std::string::npos);

  store->set_with_ttl(elastic::keys::refusal("n2", incarnation),
                      elastic::encode(elastic::Refusal{.why = "its build (hdp 9.9.9, wire 1) is not the job's",
                                                       .by = "n1/x",
                                                       .at_ms = 1}),
                      60s);
  // A heartbeat every lease/3 reads it; then the workers are stopped and the node leaves.
  auto status = cluster.agent("n2").wait_for(cluster.options().lease + 3s);
  ASSERT_TRUE(status.has_value()) << cluster.all_logs();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 5) << *status << "\n" << cluster.agent_log("n2");
  EXPECT_NE(cluster.agent_log("n2").find("is refused by the job's leader (n1/x): its build (hdp 9.9.9, wire 1)"),
            std::string::npos)
      << cluster.agent_log("n2");
  for (pid_t pid : workers) EXPECT_NE(::kill(pid, 0), 0) << "worker " << pid << " outlived its refused agent";
  EXPECT_EQ(cluster.get(elastic::keys::node("n2")), std::nullopt) << "it left: deregistered, not expired";
  ASSERT_GE(cluster.wait_for_members({"n1"}, 5s), 0) << cluster.all_logs();
  expect_progress(cluster, 5, 10s);
}

}  // namespace
}  // namespace hdp::test
