// Redundant optimizer shards in the real trainer (--redundant-shards, mesh/step/buddies.h): real
// `hdp agent` processes with real `hdp train` workers (the tiny model), a private redis-server.
// Two nodes of two workers: every shard's copy is placed on the other node at the generation's
// start and kept bitwise equal by every step, as the ranks' checksums show every 5 steps (the
// trainer logs an error naming both ranks on any mismatch). After one node is SIGKILLed the job
// runs on one node (no other node: no copies), and when the node comes back the copies are placed
// and verified again, over the restored state.
#include <gtest/gtest.h>

#include <regex>

#include "tests/agents/agent_cluster.h"
#include "tests/support/temp_dir.h"

namespace hdp::test {
namespace {

using namespace std::chrono_literals;

int count_of(const std::string& text, const std::regex& pattern) {
  return static_cast<int>(std::distance(std::sregex_iterator(text.begin(), text.end(), pattern), std::sregex_iterator()));
}

TEST(RedundantShards, CopiesStayEqualAcrossStepsAndAreReplacedAfterANodeReturns) {
  TempDir dir;
  ClusterOptions o;
  o.nnodes = "1:2";
  o.nproc = 2;
  o.train_args = tiny_trainer_args((dir.path() / "ckpt").string(), 2048, 10,
                                   {"--redundant-shards", "--verify-replicas-every", "5"});
  AgentCluster cluster(o);
  cluster.start_agent("n1");
  cluster.start_agent("n2");
  ASSERT_GE(cluster.wait_for_members({"n1", "n2"}, 30s), 0);
  const std::regex verified4("4 optimizer shard copies verified equal");
  ASSERT_GE(cluster.wait_until([&] { return count_of(cluster.all_logs(), verified4) >= 3; }, 60s), 0)
      << cluster.all_logs().substr(0, 100000);

  cluster.agent("n2").kill();
  ASSERT_GE(cluster.wait_until([&] { return cluster.state()["world_size"] == "2"; }, 60s), 0);
  const std::int64_t alone = cluster.step();
  ASSERT_GE(cluster.wait_until([&] { return cluster.step() >= alone + 10; }, 60s), 0);
  const int before = count_of(cluster.all_logs(), verified4);

  cluster.start_agent("n2");
  ASSERT_GE(cluster.wait_until([&] { return count_of(cluster.all_logs(), verified4) >= before + 2; }, 90s), 0)
      << cluster.all_logs().substr(0, 100000);
  const std::string logs = cluster.all_logs();
  EXPECT_EQ(logs.find("differs from the original"), std::string::npos) << "a copy diverged";
  EXPECT_NE(logs.find("(none: the job runs on one node)"), std::string::npos) << "no one-node generation seen";
  EXPECT_GE(count_of(logs, std::regex("every optimizer shard copied to a rank of another node\n")), 2)
      << "copies placed at the first generation and after the node returned";
}

}  // namespace
}  // namespace hdp::test
