// A joiner prepared beside the running job (elastic/preparing_workers.h, docs/architecture.md),
// with real `hdp agent` processes, real `hdp train` workers (the tiny model) and a real
// redis-server: node n1 trains alone; n2 starts, its worker slow to set up (`--fault
// setup:n2/0:5000`: it sleeps 5 s after telling its agent it is preparing, as a GPU context or a
// large model's buffers take long). Asserted:
//   - n2 is admitted only after its worker is set up: the generation with it comes at least 5 s
//     after n2's agent started (without the preparation key, after the 300 ms settle window);
//   - the leader says why it waits ("joins once its workers are set up"), and while it waits the
//     job's state lists n2 as standing by and preparing, `hdp status` says n2 is setting up (not a
//     standby ready to take a place); once admitted, neither lists it;
//   - the running rank does not wait for the joiner: the longest interval between two of rank 0's
//     lines from n2's start to the 10th line at world size 2 (a step, or a step and the switch:
//     bootstrap, rebuild from memory) stays under 2.5 s. Waiting for the joiner in the bootstrap
//     makes it the bootstrap's timeout (3 s here) or more; CI runs four tests at once on its two
//     cores;
//   - the job goes on at world size 2 (10 steps).
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "tests/agents/agent_cluster.h"
#include "tests/support/child_process.h"
#include "tests/support/temp_dir.h"
#include "tests/trainer/run_records.h"

namespace hdp::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr auto kSetupDelay = 5000ms;
constexpr double kPauseBoundSeconds = 2.5;

TEST(PreparedJoin, AJoinerSlowToSetUpIsAdmittedOnceReadyAndTheRunningRankDoesNotWaitForIt) {
  TempDir dir("hdp-prepared-join");
  const auto metrics = dir.path() / "metrics.jsonl";
  ClusterOptions o;
  o.nnodes = "1:2";
  o.nproc = 1;
  o.train_args = tiny_trainer_args((dir.path() / "ckpt").string(), 512, 1000,
                                   {"--metrics-file", metrics.string(), "--no-speed-aware", "--fault",
                                    "setup:n2/0:" + std::to_string(kSetupDelay.count())});
  AgentCluster cluster(o);
  start_training(cluster, {"n1"});
  const auto started = Clock::now();
  const std::int64_t started_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  cluster.start_agent("n2");
  // While its worker sets up (5 s): listed as preparing, and `hdp status` says so.
  ASSERT_GE(cluster.wait_until([&] { return cluster.state()["preparing"] == "n2"; }, 30s), 0)
      << "state: standby '" << cluster.state()["standby"] << "', preparing '" << cluster.state()["preparing"] << "'\n"
      << cluster.all_logs();
  EXPECT_EQ(cluster.state()["standby"], "n2");
  const CommandResult status =
      run_command({cluster.hdp(), "status", "--job", cluster.job(), "--redis", cluster.redis().url()}, {}, 60s);
  EXPECT_EQ(status.exit_code, 0) << status.err;
  EXPECT_NE(status.out.find("setting up (registered; they join, or stand by at MAX, once their workers are set up): n2"),
            std::string::npos)
      << status.out;
  EXPECT_EQ(status.out.find("standby (registered"), std::string::npos) << "n2 is not ready to take a place\n" << status.out;
  ASSERT_GE(cluster.wait_for_members({"n1", "n2"}, 120s), 0) << cluster.all_logs();
  EXPECT_EQ(cluster.state()["preparing"], "") << "n2 is a member now";
  EXPECT_EQ(cluster.state()["standby"], "") << "n2 is a member now";
  const double admitted_s = std::chrono::duration<double>(Clock::now() - started).count();
  EXPECT_GE(admitted_s, std::chrono::duration<double>(kSetupDelay).count())
      << "n2 was admitted before its worker was set up\n" << cluster.all_logs();
  EXPECT_NE(cluster.all_logs().find("joins once its workers are set up"), std::string::npos) << cluster.all_logs();
  // Rank 0's lines: the first at world size 2 after one at 1, and 10 more after it.
  std::vector<StepLine> lines;
  std::size_t first_at_two = 0;
  cluster.wait_until(
      [&] {
        lines = read_metrics(metrics);
        for (std::size_t i = 1; i < lines.size() && first_at_two == 0; ++i) {
          if (lines[i].world == 2 && lines[i - 1].world == 1) first_at_two = i;
        }
        return first_at_two > 0 && lines.size() > first_at_two + 10;
      },
      120s);
  ASSERT_GT(first_at_two, 0u) << "no step at world size 2 after one at 1\n" << cluster.all_logs();
  EXPECT_GT(lines.size(), first_at_two + 10) << "the job did not go on at world size 2\n" << cluster.all_logs();
  // The longest interval between two of rank 0's lines from n2's start to the 10th line after the
  // switch: the switch itself, or a wait for the joiner wherever it fell (in the bootstrap, or
  // after a bootstrap that timed out and broke the generation).
  double pause_s = 0;
  std::int64_t pause_to = 0;
  for (std::size_t i = 1; i <= first_at_two + 10 && i < lines.size(); ++i) {
    if (lines[i].time_ms < started_ms) continue;
    const double gap = (lines[i].time_ms - lines[i - 1].time_ms) / 1000.0;
    if (gap > pause_s) {
      pause_s = gap;
      pause_to = lines[i].step;
    }
  }
  EXPECT_LT(pause_s, kPauseBoundSeconds) << cluster.all_logs();
  std::cout << "n2 admitted " << admitted_s << " s after its agent started (its setup " << kSetupDelay.count()
            << " ms); the running rank's longest interval between lines since " << pause_s << " s (before step "
            << pause_to << "; world size 2 from step " << lines[first_at_two].step << ")\n";
}

}  // namespace
}  // namespace hdp::test
