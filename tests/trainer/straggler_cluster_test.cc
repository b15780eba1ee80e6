// Stragglers end to end: real `hdp agent` processes with real `hdp train` workers (the tiny model
// on synthetic documents), a real redis-server, real checkpoints. One worker per node, three nodes
// (the job's minimum is two unless a case says otherwise). Each case reads what happened from
// the job's events (straggler, evict, readmit, evict_refused) and rank 0's metrics file.
//
// The bounds:
//   - a rank slowed to 0.1 is evicted within K + 2 = 7 steps of its slowdown: the filter sees it
//     on its second slow step, K = 5 strikes follow, and the ranks leave at the next boundary;
//     the step its request names is at most S + K + 1;
//   - it is readmitted once its cool-down (3 s) is over, at most settle (300 ms) + 8 s of slack
//     later (restores from the checkpoint and process start-up under CI's load);
//   - the second eviction of the same node/slot holds it out at least twice as long (6 s);
//   - a rank oscillating around the threshold (6 slow steps, 4 normal, over and over) is evicted
//     at most once in 50 steps: a second eviction needs 2K consecutive slow steps;
//   - a SIGSTOPped rank is evicted within the collective timeout (3 s) + 6 s, and readmitted
//     after SIGCONT and its cool-down;
//   - the job never runs below its minimum size for a straggler: with two nodes of a 2-node
//     minimum, the slow rank is kept (evict_refused) and planned around.
// Every rank compares the plan digests of every step (trainer.cc): a test whose workers planned
// differently would fail with "planned step … differently" in the logs, which each case checks.
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "elastic/job_keys.h"
#include "elastic/job_state.h"
#include "tests/agents/agent_cluster.h"
#include "tests/support/child_process.h"
#include "tests/support/temp_dir.h"

namespace hdp::test {
namespace {

using namespace std::chrono_literals;
using Fields = std::map<std::string, std::string>;

constexpr int kStrikes = 5;

std::vector<std::string> train_args(const std::filesystem::path& dir, std::vector<std::string> extra) {
  std::vector<std::string> args = {"--model",          "tiny",  "--steps",        "1000000",
                                   "--context",        "256",   "--capacity",     "256",
                                   "--batch-tokens",   "4096",  "--data",         "synthetic:github",
                                   "--checkpoint-dir", (dir / "ckpt").string(), "--checkpoint-every", "10",
                                   "--metrics-file",   (dir / "metrics.jsonl").string(), "--timeout-ms", "3000",
                                   "--threads",        "1",     "--log-every",    "20",
                                   "--straggler-strikes", std::to_string(kStrikes)};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

class StragglerCluster : public ::testing::Test {
 protected:
  void start(const std::string& nnodes, const std::vector<std::string>& nodes, std::vector<std::string> extra) {
    ClusterOptions o;
    o.nnodes = nnodes;
    o.nproc = 1;
    o.train_args = train_args(dir_.path(), std::move(extra));
    cluster_ = std::make_unique<AgentCluster>(o);
    for (const auto& node : nodes) cluster_->start_agent(node);
  }
  std::vector<Fields> events(const std::string& type) {
    std::vector<Fields> out;
    for (const auto& e : cluster_->store()->stream_tail(elastic::keys::kEvents, elastic::kEventsKept)) {
      Fields f(e.fields.begin(), e.fields.end());
      if (f["type"] == type) out.push_back(std::move(f));
    }
    return out;
  }
  // Waits until there are `count` events of `type`; returns them (empty after the timeout).
  std::vector<Fields> wait_events(const std::string& type, std::size_t count, std::chrono::milliseconds timeout) {
    std::vector<Fields> found;
    cluster_->wait_until(
        [&] {
          found = events(type);
          return found.size() >= count;
        },
        timeout);
    return found.size() >= count ? found : std::vector<Fields>{};
  }
  // The world sizes of every step rank 0 ran.
  std::vector<int> worlds() {
    std::vector<int> sizes;
    std::ifstream in(dir_.path() / "metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      sizes.push_back(nlohmann::json::parse(line).at("world_size").get<int>());
    }
    return sizes;
  }
  void expect_identical_plans() {
    const std::string logs = cluster_->all_logs();
    EXPECT_EQ(logs.find("differently"), std::string::npos) << "the ranks planned a step differently";
  }
  static std::int64_t ms(const Fields& f, const char* field) { return std::stoll(f.at(field)); }
  void TearDown() override {
    if (HasFailure() && cluster_) std::cerr << cluster_->all_logs().substr(0, 200000);
  }

  TempDir dir_;
  std::unique_ptr<AgentCluster> cluster_;
};

TEST_F(StragglerCluster, ASlowRankIsEvictedReadmittedAndHeldOutTwiceAsLongTheSecondTime) {
  constexpr int kSlowFrom = 20;
  start("2:3", {"n1", "n2", "n3"}, {"--fault", "slow:n2/0@" + std::to_string(kSlowFrom) + ":0.1", "--evict-cooldown-s", "3"});

  const auto first = wait_events("evict", 1, 90s);
  ASSERT_EQ(first.size(), 1u) << "no eviction";
  EXPECT_EQ(first[0].at("node"), "n2");
  EXPECT_EQ(first[0].at("reason"), "slow");
  EXPECT_EQ(first[0].at("count"), "1");
  EXPECT_LE(std::stoll(first[0].at("step")), kSlowFrom + kStrikes + 1) << "evicted later than K + 2 steps";
  EXPECT_LT(std::stod(first[0].at("speed")), 0.35);
  const auto slow = events("straggler");
  ASSERT_FALSE(slow.empty());
  EXPECT_EQ(slow[0].at("node"), "n2");
  // The job goes on without it.
  ASSERT_GE(cluster_->wait_for_members({"n1", "n3"}, 20s), 0);
  const std::int64_t step = cluster_->step();
  expect_progress(*cluster_, 5, 30s);

  // Readmitted after its cool-down.
  const auto back = wait_events("readmit", 1, 30s);
  ASSERT_EQ(back.size(), 1u) << "not readmitted";
  const double out_s = (ms(back[0], "time_ms") - ms(first[0], "time_ms")) / 1000.0;
  EXPECT_GE(out_s, 3.0);
  EXPECT_LE(out_s, 3.0 + 0.3 + 8.0);
  EXPECT_GT(cluster_->step(), step);

  // Still slow: evicted again, after twice the strikes, for twice as long.
  const auto second = wait_events("evict", 2, 90s);
  ASSERT_EQ(second.size(), 2u) << "no second eviction";
  EXPECT_EQ(second[1].at("count"), "2");
  EXPECT_NEAR(std::stod(second[1].at("cooldown_s")), 6.0, 0.1);
  const auto back2 = wait_events("readmit", 2, 40s);
  ASSERT_EQ(back2.size(), 2u) << "not readmitted the second time";
  const double out2_s = (ms(back2[1], "time_ms") - ms(second[1], "time_ms")) / 1000.0;
  EXPECT_GE(out2_s, 6.0);
  EXPECT_GE(out2_s, 2 * 3.0);

  // hdp status names it, and its speeds.
  const std::string table =
      run_command({cluster_->hdp(), "status", "--job", cluster_->job(), "--redis", cluster_->redis().url()}).out;
  EXPECT_NE(table.find("n2/0  slow at speed"), std::string::npos) << table;
  EXPECT_NE(table.find("SPEEDS"), std::string::npos) << table;
  const auto json = nlohmann::json::parse(
      run_command({cluster_->hdp(), "status", "--json", "--job", cluster_->job(), "--redis", cluster_->redis().url()}).out);
  ASSERT_TRUE(json["state"]["speeds"].is_array()) << json.dump();
  EXPECT_EQ(json["evictions"].size(), 1u);
  EXPECT_EQ(json["evictions"][0]["count"], 2);
  for (int world : worlds()) EXPECT_GE(world, 2);
  expect_identical_plans();
}

TEST_F(StragglerCluster, ARankOscillatingAroundTheThresholdIsEvictedAtMostOnceIn50Steps) {
  // 6 steps at a quarter speed, then 4 at full, from step 20 to 70: each slow block gives K = 5
  // strikes, enough for a first eviction, never for a second (2K).
  std::vector<std::string> extra = {"--evict-cooldown-s", "1"};
  for (int s = 20; s < 70; s += 10) {
    extra.push_back("--fault");
    extra.push_back("slow:n2/0@" + std::to_string(s) + "-" + std::to_string(s + 5) + ":0.25");
  }
  start("2:3", {"n1", "n2", "n3"}, extra);
  ASSERT_GE(cluster_->wait_until([&] { return cluster_->step() >= 75; }, 150s), 0) << "the job did not reach step 75";
  const auto evictions = events("evict");
  EXPECT_LE(evictions.size(), 1u);
  EXPECT_EQ(evictions.size(), 1u) << "the first block should have evicted it (else the test proves nothing)";
  expect_identical_plans();
}

TEST_F(StragglerCluster, ASigstoppedRankIsEvictedAfterTheTimeoutAndReadmittedAfterSigcont) {
  start("2:3", {"n1", "n2", "n3"}, {"--evict-cooldown-s", "4"});
  ASSERT_GE(cluster_->wait_until([&] { return cluster_->step() >= 15; }, 60s), 0);
  const auto pids = cluster_->worker_pids("n2");
  ASSERT_EQ(pids.size(), 1u);
  ASSERT_EQ(::kill(pids[0], SIGSTOP), 0);
  const auto stopped = std::chrono::steady_clock::now();
  const auto evicted = wait_events("evict", 1, 30s);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped).count();
  ::kill(pids[0], SIGCONT);
  ASSERT_EQ(evicted.size(), 1u) << "the stopped rank was not evicted";
  EXPECT_EQ(evicted[0].at("node"), "n2");
  EXPECT_EQ(evicted[0].at("reason"), "timeout");
  EXPECT_LE(took, 3.0 + 6.0);
  ASSERT_GE(cluster_->wait_for_members({"n1", "n3"}, 20s), 0);
  expect_progress(*cluster_, 5, 30s);
  const auto back = wait_events("readmit", 1, 30s);
  ASSERT_EQ(back.size(), 1u) << "not readmitted after SIGCONT and its cool-down";
  EXPECT_GE((ms(back[0], "time_ms") - ms(evicted[0], "time_ms")) / 1000.0, 4.0);
  ASSERT_GE(cluster_->wait_for_members({"n1", "n2", "n3"}, 20s), 0);
  expect_progress(*cluster_, 5, 30s);
  expect_identical_plans();
}

TEST_F(StragglerCluster, AtTheMinimumSizeTheSlowRankIsKeptAndPlannedAround) {
  start("2:2", {"n1", "n2"}, {"--fault", "slow:n2/0@10:0.1"});
  const auto kept = wait_events("evict_refused", 1, 60s);
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(kept[0].at("node"), "n2");
  const std::int64_t step = cluster_->step();
  expect_progress(*cluster_, 20, 60s);
  EXPECT_TRUE(events("evict").empty());
  for (int world : worlds()) EXPECT_EQ(world, 2);
  // Planned around: its speed is low and the plan gives it little work (its relative speed is
  // what rank 0 publishes).
  const auto speeds = elastic::parse_number_list("speeds", cluster_->state().at("speeds"));
  ASSERT_EQ(speeds.size(), 2u);
  const auto g = cluster_->current();
  ASSERT_TRUE(g.has_value());
  const int slow_rank = g->members[0].node == "n2" ? 0 : 1;
  EXPECT_LT(speeds[static_cast<std::size_t>(slow_rank)], 0.35);
  EXPECT_GT(speeds[static_cast<std::size_t>(1 - slow_rank)], 0.9);
  EXPECT_GT(cluster_->step(), step);
  expect_identical_plans();
}

}  // namespace
}  // namespace hdp::test
