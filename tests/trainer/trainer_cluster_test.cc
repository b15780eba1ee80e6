// The elastic trainer end to end: real `hdp agent` processes with real `hdp train` workers (the
// tiny model on this machine's C/C++ headers), a real redis-server, real HDF5 checkpoints.
//
// Equivalence: the same job (seed fixed, 2 agents x 2 workers, 300 steps, plans at equal speeds:
// --no-speed-aware, since measured speeds would make the plans, and so the order in which
// gradients are summed, depend on timing) run
//   (a) without faults;
//   (b) with a worker SIGKILLed at step 50 (`--fault crash:1@50`; its agent restarts it);
//   (c) with a node SIGKILLed at step 50 (`--fault kill-node:2@50`: its agent and both workers)
//       and started again once the job runs without it;
//   (b) and (c) without the redundant shards (--no-redundant-shards): the lost shard has no copy,
//   so the job rolls back to its checkpoint (recovery from memory: recovery_cluster_test.cc);
//   (d) stopped with SIGTERM to both agents part-way, then resumed by a new job on the same
//       checkpoint directory;
//   (f) with the redis-server stalled (DEBUG SLEEP) for 1.5x and 3x the lease part-way: the store's
//       trouble, not the nodes' (docs/architecture.md, "The store's bad days"); no worker
//       restarted, no node evicted, no generation without members, no step lost, and steps keep
//       coming during the stall at >= 80% of the rate before it (rank 0 reports off the critical
//       path); the run equals (a) bitwise;
//   (g) with the redis-server restarted from a snapshot taken ~30 steps earlier: no worker
//       restarted, no step lost, the run equals (a) bitwise, and generations published after it
//       are above every number published before;
//   (e) with the redis-server SIGKILLed and restarted empty part-way, the agent listed first held
//       back meanwhile: the agents bring the same members back in a new generation, in the other
//       order, and the workers continue from memory, handing their optimizer shards to the ranks
//       that now own them.
// Rank 0 writes every executed step's exact loss and world size (--metrics-file). The assertions:
//   - (d) and (e) equal (a) bitwise: every step's loss, and the final checkpoint's parameters and both
//     AdamW moments;
//   - in (b) and (c), every step executed on a state that only ever saw 4 ranks (no step at
//     another world size before it in the run) equals (a)'s bitwise, replayed steps after a
//     rollback included, and the rollback did replay steps;
//   - steps that follow a step at another world size (the 2 ranks of (c), or 3 in (b) when the
//     leader publishes before the crashed worker is back) differ from (a) only by rounding: the
//     same batches and plans summed in another order. Bound: relative 1e-4 on each step's loss and
//     1e-3 on the final parameters (L2 ratio). A float32 step differs by ~1e-7 relative between
//     world sizes (tests/mesh/step_equivalence_test.cc), and Adam's normalised updates let such
//     differences grow over the steps that follow; measured here: 4e-8 on the loss and 3e-7 on the
//     parameters after ~250 steps, so the bounds leave a factor of 1000. A different computation
//     (a batch skipped or repeated, a wrong restore, a learning rate off by a step) moves the loss
//     by 1e-3 or more.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <thread>

#include "checkpoint/group.h"
#include "checkpoint/restorer.h"
#include "elastic/job_keys.h"
#include "elastic/redis_connection.h"
#include "elastic/redis_url.h"
#include "tests/agents/agent_cluster.h"
#include "tests/support/reference_run.h"
#include "tests/support/temp_dir.h"
#include "tests/trainer/run_records.h"
#include "trainer/trainer_config.h"

namespace hdp::test {
namespace {

using namespace std::chrono_literals;

constexpr int kSteps = 300;

std::vector<std::string> train_args(const std::filesystem::path& dir, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"--model",        "tiny",  "--steps",          std::to_string(kSteps),
                                   "--context",      "128",   "--capacity",       "128",
                                   "--batch-tokens", "1024",  "--lr",             "3e-3",
                                   "--warmup-steps", "10",    "--seed",           "77",
                                   "--checkpoint-dir", (dir / "ckpt").string(), "--checkpoint-every", "10",
                                   "--metrics-file", (dir / "metrics.jsonl").string(), "--timeout-ms", "5000",
                                   "--threads",      "1",     "--log-every",      "10",
                                   // Equal speeds: a plan from measured speeds depends on timing, so
                                   // two runs would sum the same gradients in another order.
                                   "--no-speed-aware"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

ClusterOptions options_for(const std::filesystem::path& dir, std::vector<std::string> extra = {}) {
  ClusterOptions o;
  o.nnodes = "1:2";
  o.nproc = 2;
  o.train_args = train_args(dir, std::move(extra));
  o.redis_args = {"--enable-debug-command", "yes"};  // DEBUG SLEEP for (f)
  return o;
}

std::int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

double relative_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

class TrainerCluster : public ::testing::Test {
 protected:
  // (a), once for every test of the suite.
  static void SetUpTestSuite() {
    reference_ = std::make_unique<ReferenceRun>([](const std::filesystem::path& dir) { return options_for(dir); },
                                                std::vector<std::string>{"n1", "n2"}, 240s, "trainer-cluster");
  }
  static void TearDownTestSuite() { reference_.reset(); }
  void SetUp() override {
    ASSERT_TRUE(reference_->ok()) << "the fault-free run did not complete";
    const std::vector<StepLine>& steps = reference_->steps();
    ASSERT_EQ(steps.size(), static_cast<std::size_t>(kSteps));
    for (std::size_t i = 0; i < steps.size(); ++i) {
      ASSERT_EQ(steps[i].step, static_cast<std::int64_t>(i + 1));
      ASSERT_EQ(steps[i].world, 4);
    }
  }

  // Compares a run's executed steps with (a): bitwise while the run has only ever had 4 ranks,
  // within the rounding bound after. Returns {replayed steps, largest relative loss difference}.
  // Every step must have a line, except one that a new generation rolled forward while no rank had
  // computed the step's loss (each failed before the loss was reduced): the trainer logs that it
  // cannot report it, and `logs` (the agents' and workers' output) must say so for each step
  // without a line.
  std::pair<int, double> compare(const std::vector<StepLine>& run, const std::string& logs = {}) {
    bool pure = true;
    int replayed = 0;
    double worst = 0;
    std::set<std::int64_t> seen;
    for (const StepLine& line : run) {
      if (line.world != 4) pure = false;
      if (!seen.insert(line.step).second) ++replayed;
      const double expected = reference_->loss(line.step);
      if (pure) {
        EXPECT_EQ(line.loss, expected) << "step " << line.step << " on 4 ranks, every step before it too";
      } else {
        const double rel = std::abs(line.loss - expected) / std::abs(expected);
        worst = std::max(worst, rel);
        EXPECT_LE(rel, 1e-4) << "step " << line.step << " on " << line.world << " ranks";
      }
    }
    EXPECT_EQ(run.back().step, kSteps);
    expect_every_step_ran([&](std::int64_t step) { return seen.contains(step); }, kSteps, logs);
    return {replayed, worst};
  }

  void expect_final(const std::filesystem::path& dir, bool bitwise) {
    const Final a = read_final(reference_->dir() / "ckpt"), b = read_final(dir / "ckpt");
    EXPECT_EQ(a.step, kSteps);
    EXPECT_EQ(b.step, kSteps);
    if (bitwise) {
      EXPECT_TRUE(a.params == b.params) << "parameters differ";
      EXPECT_TRUE(a.m == b.m) << "exp_avg differs";
      EXPECT_TRUE(a.v == b.v) << "exp_avg_sq differs";
    } else {
      const double p = relative_l2(b.params, a.params);
      std::cout << "final parameters: relative L2 difference " << p << "\n";
      EXPECT_LE(p, 1e-3);
    }
  }

  // (f), for `leases` times the lease.
  void stall(double leases);

  static std::unique_ptr<ReferenceRun> reference_;
};

std::unique_ptr<ReferenceRun> TrainerCluster::reference_;

TEST_F(TrainerCluster, AFullStopAndResumeReproducesTheRunBitwise) {
  TempDir dir;
  std::int64_t stopped_at = 0;
  {
    AgentCluster cluster(options_for(dir.path()));
    cluster.start_agent("n1");
    cluster.start_agent("n2");
    ASSERT_GE(cluster.wait_until([&] { return cluster.step() >= 45; }, 120s), 0) << cluster.all_logs();
    cluster.agent("n1").signal(SIGTERM);
    cluster.agent("n2").signal(SIGTERM);
    const auto codes = wait_for_agents(cluster, {"n1", "n2"}, 60s);
    EXPECT_EQ(codes.at("n1"), 4) << cluster.all_logs();  // drained: requeue is fine
    EXPECT_EQ(codes.at("n2"), 4);
    const auto state = cluster.state();
    ASSERT_EQ(state.at("status"), "stopped") << cluster.all_logs();
    stopped_at = std::stoll(state.at("step"));
    EXPECT_EQ(state.at("last_ckpt_step"), state.at("step")) << "the stop wrote a final checkpoint";
    EXPECT_LT(stopped_at, kSteps);
  }
  {
    AgentCluster cluster(options_for(dir.path()));  // a new job (a second `hdp run`) on the same directory
    cluster.start_agent("n1");
    cluster.start_agent("n2");
    const auto codes = wait_for_agents(cluster, {"n1", "n2"}, 240s);
    EXPECT_EQ(codes.at("n1"), 0) << cluster.all_logs();
    EXPECT_EQ(codes.at("n2"), 0);
    EXPECT_NE(cluster.all_logs().find("restored"), std::string::npos);
  }
  const auto run = read_metrics(dir.path() / "metrics.jsonl");
  ASSERT_EQ(run.size(), static_cast<std::size_t>(kSteps)) << "a step was skipped or repeated across the stop";
  const auto [replayed, worst] = compare(run);
  EXPECT_EQ(replayed, 0);
  EXPECT_EQ(worst, 0.0);
  expect_final(dir.path(), /*bitwise=*/true);
  std::cout << "stopped at step " << stopped_at << ", resumed to " << kSteps << "\n";
}

TEST_F(TrainerCluster, AWorkerKilledMidRunIsRolledBackAndReplayedExactly) {
  TempDir dir;
  AgentCluster cluster(options_for(dir.path(), {"--fault", "crash:1@50", "--no-redundant-shards"}));
  cluster.start_agent("n1");
  cluster.start_agent("n2");
  const auto codes = wait_for_agents(cluster, {"n1", "n2"}, 240s);
  EXPECT_EQ(codes.at("n1"), 0) << cluster.all_logs();
  EXPECT_EQ(codes.at("n2"), 0);
  const auto run = read_metrics(dir.path() / "metrics.jsonl");
  ASSERT_FALSE(run.empty());
  const auto [replayed, worst] = compare(run, cluster.all_logs());
  EXPECT_GT(replayed, 0) << "the crash at step 50 should roll back to the checkpoint of step 40";
  const bool pure = std::all_of(run.begin(), run.end(), [](const StepLine& l) { return l.world == 4; });
  expect_final(dir.path(), pure);
  std::cout << replayed << " step(s) replayed; " << (pure ? "every step on 4 ranks" : "some steps on fewer ranks")
            << "; largest relative loss difference " << worst << "\n";
}

TEST_F(TrainerCluster, ANodeKilledAndRestartedRejoinsAndTheLossStaysOnTheCurve) {
  TempDir dir;
  AgentCluster cluster(options_for(dir.path(), {"--fault", "kill-node:2@50", "--no-redundant-shards"}));
  cluster.start_agent("n1");
  cluster.start_agent("n2");
  // Rank 2 is the first worker of the second node in the generation; whichever node that is dies.
  const std::string victim = cluster.wait_for_dead_agent({"n1", "n2"}, 120s);
  ASSERT_FALSE(victim.empty()) << cluster.all_logs();
  const std::string survivor = victim == "n1" ? "n2" : "n1";
  ASSERT_GE(cluster.wait_for_members({survivor}, 30s), 0) << cluster.all_logs();
  ASSERT_GE(cluster.wait_until([&] { return cluster.state().count("status") && cluster.step() >= 45; }, 60s), 0);
  cluster.start_agent(victim);
  const auto codes = wait_for_agents(cluster, {"n1", "n2"}, 240s);
  EXPECT_EQ(codes.at(survivor), 0) << cluster.all_logs();
  EXPECT_EQ(codes.at(victim), 0) << cluster.all_logs();
  const auto run = read_metrics(dir.path() / "metrics.jsonl");
  ASSERT_FALSE(run.empty());
  const bool shrank = std::any_of(run.begin(), run.end(), [](const StepLine& l) { return l.world == 2; });
  EXPECT_TRUE(shrank) << "the job should have trained on the survivor's 2 ranks";
  EXPECT_EQ(run.back().world, 4) << "the restarted node should have rejoined";
  const auto [replayed, worst] = compare(run, cluster.all_logs());
  EXPECT_GT(replayed, 0);
  expect_final(dir.path(), /*bitwise=*/false);
  std::cout << replayed << " step(s) replayed; largest relative loss difference " << worst << "\n";
}

TEST_F(TrainerCluster, AnEmptyRedisRestartMidRunLosesNoStepAndRestartsNoWorker) {
  TempDir dir;
  AgentCluster cluster(options_for(dir.path()));
  cluster.start_agent("n1");
  cluster.start_agent("n2");
  ASSERT_GE(cluster.wait_until([&] { return cluster.step() >= 60; }, 120s), 0) << cluster.all_logs();
  // The agent listed first holds ranks 0-1. Held back (SIGSTOP; its workers train on) while the
  // other agent finds the store empty and registers again, it comes back second: the same workers
  // renumbered, so the ranks must also hand their optimizer shards over.
  const auto first = cluster.current();
  ASSERT_TRUE(first.has_value());
  const std::string held = first->members.front().node, other = held == "n1" ? "n2" : "n1";
  cluster.agent(held).signal(SIGSTOP);
  cluster.redis().restart();  // SIGKILL; a fresh, empty server on the same port
  const double registered = cluster.wait_until(
      [&] { return !cluster.store()->keys(elastic::keys::lease(other, "")).empty(); }, 10s);
  cluster.agent(held).signal(SIGCONT);
  ASSERT_GE(registered, 0) << cluster.all_logs();
  const auto codes = wait_for_agents(cluster, {"n1", "n2"}, 240s);
  EXPECT_EQ(codes.at("n1"), 0) << cluster.all_logs();
  EXPECT_EQ(codes.at("n2"), 0);
  const std::string logs = cluster.all_logs();
  expect_no_worker_restarted(logs, 4);
  EXPECT_NE(logs.find("continuing from memory"), std::string::npos) << "the new generation should continue in memory\n" << logs;
  EXPECT_NE(logs.find("its optimizer shard moved from rank"), std::string::npos)
      << "the ranks should have been renumbered\n" << logs;
  const auto run = read_metrics(dir.path() / "metrics.jsonl");
  ASSERT_EQ(run.size(), static_cast<std::size_t>(kSteps)) << "a step was lost or repeated";
  const auto [replayed, worst] = compare(run);
  EXPECT_EQ(replayed, 0);
  expect_final(dir.path(), /*bitwise=*/true);
}

// The whole job SIGKILLed (agents and, with them, workers) and started again on the same store:
// the restore event counts the steps really redone, from the last step the job reported to the
// checkpoint it restored, although no rank's memory survived.
TEST_F(TrainerCluster, AWholeJobKilledAndRestartedCountsTheStepsItRedoes) {
  TempDir dir;
  AgentCluster cluster(options_for(dir.path()));
  cluster.start_agent("n1");
  cluster.start_agent("n2");
  ASSERT_GE(cluster.wait_until([&] { return cluster.step() >= 45 && cluster.step() % 10 >= 3; }, 120s), 0)
      << cluster.all_logs();
  cluster.agent("n1").signal(SIGKILL);
  cluster.agent("n2").signal(SIGKILL);
  wait_for_agents(cluster, {"n1", "n2"}, 30s);
  const std::int64_t reported = cluster.step();  // the last step in the job state
  // The workers die with their agents (PR_SET_PDEATHSIG); their leases then run out.
  cluster.start_agent("n1");
  cluster.start_agent("n2");
  const auto codes = wait_for_agents(cluster, {"n1", "n2"}, 240s);
  EXPECT_EQ(codes.at("n1"), 0) << cluster.all_logs();
  EXPECT_EQ(codes.at("n2"), 0);
  std::optional<std::pair<std::int64_t, std::int64_t>> restore;  // {step restored, lost_steps}
  for (const auto& entry : cluster.store()->stream_tail(elastic::keys::kEvents, 1000)) {
    std::map<std::string, std::string> f(entry.fields.begin(), entry.fields.end());
    if (f["type"] == "restore" && f["source"] == "checkpoint") restore.emplace(std::stoll(f["step"]), std::stoll(f["lost_steps"]));
  }
  ASSERT_TRUE(restore.has_value()) << "no restore from a checkpoint was recorded";
  EXPECT_EQ(restore->second, reported - restore->first)
      << "reported step " << reported << ", restored step " << restore->first;
  EXPECT_GT(restore->second, 0);
  const auto run = read_metrics(dir.path() / "metrics.jsonl");
  const auto [replayed, worst] = compare(run, cluster.all_logs());
  EXPECT_GE(replayed, restore->second) << "the steps counted lost were redone";
  // Bitwise while the job only ever ran on 4 ranks, as compare() judges the losses: the restarted
  // agents join within the settle window on a quiet machine, but one that registers later (a
  // loaded machine) lets the other's node run a few steps alone, on 2 ranks, first.
  const bool four_ranks_only = std::all_of(run.begin(), run.end(), [](const StepLine& l) { return l.world == 4; });
  expect_final(dir.path(), /*bitwise=*/four_ranks_only);
  std::cout << "reported step " << reported << ", restored step " << restore->first << ": " << restore->second
            << " step(s) lost and redone" << (four_ranks_only ? "" : "; some steps ran on fewer than 4 ranks") << "\n";
}

// The store gone for good (redis-server SIGKILLed, never started again; what a primary down with
// no sentinel quorum looks like): the agents ride it out for --store-outage-limit (3 s here), then
// stop the workers at one step with a final checkpoint on disk and exit 1 naming the store.
// Bound: the limit, plus a heartbeat to notice, plus the drain (a step and a checkpoint), plus
// 20 s for process exits on a loaded machine.
TEST_F(TrainerCluster, AStoreGoneForGoodStopsTheJobCleanlyAfterTheOutageLimit) {
  TempDir dir;
  AgentCluster cluster(options_for(dir.path()));
  cluster.start_agent("n1", {"--store-outage-limit", "3"});
  cluster.start_agent("n2", {"--store-outage-limit", "3"});
  ASSERT_GE(cluster.wait_until([&] { return cluster.step() >= 40; }, 120s), 0) << cluster.all_logs();
  const auto killed = std::chrono::steady_clock::now();
  cluster.redis().kill();
  const auto codes = wait_for_agents(cluster, {"n1", "n2"}, 60s);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  EXPECT_EQ(codes.at("n1"), 1) << cluster.all_logs();
  EXPECT_EQ(codes.at("n2"), 1);
  EXPECT_LT(seconds, 3 + 20.0);
  const std::string logs = cluster.all_logs();
  EXPECT_NE(logs.find("has answered no call for"), std::string::npos) << logs;
  EXPECT_EQ(logs.find("restarting workers"), std::string::npos) << logs;
  const Final saved = read_final(dir.path() / "ckpt");
  const auto run = read_metrics(dir.path() / "metrics.jsonl");
  ASSERT_FALSE(run.empty());
  EXPECT_EQ(saved.step, run.back().step) << "the final checkpoint is the last step trained";
  std::cout << "store killed at step ~40; the agents exited 1 after " << seconds << " s; final checkpoint at step "
            << saved.step << "\n";
}

// (f): the whole job's store stalls for `leases` times the lease (2 s) while rank 0 is at step ~100.
void TrainerCluster::stall(double leases) {
  TempDir dir;
  AgentCluster cluster(options_for(dir.path()));
  cluster.start_agent("n1");
  cluster.start_agent("n2");
  ASSERT_GE(cluster.wait_until([&] { return cluster.step() >= 100; }, 120s), 0) << cluster.all_logs();
  const auto sleep_ms = static_cast<std::int64_t>(leases * static_cast<double>(cluster.options().lease.count()));
  elastic::RedisEndpoint endpoint = elastic::parse_redis_url(cluster.redis().url());
  elastic::RedisConnection connection(endpoint, 2s, std::chrono::milliseconds(sleep_ms + 10000));
  const std::int64_t began = unix_ms();
  const auto reply = connection.command({"DEBUG", "SLEEP", std::to_string(static_cast<double>(sleep_ms) / 1000.0)});
  const std::int64_t ended = unix_ms();
  ASSERT_NE(reply.type, elastic::RedisReply::Type::kError) << reply.str;
  const auto codes = wait_for_agents(cluster, {"n1", "n2"}, 240s);
  EXPECT_EQ(codes.at("n1"), 0) << cluster.all_logs();
  EXPECT_EQ(codes.at("n2"), 0);
  expect_no_worker_restarted(cluster.all_logs(), 4);
  const auto run = read_metrics(dir.path() / "metrics.jsonl");
  ASSERT_EQ(run.size(), static_cast<std::size_t>(kSteps)) << "a step was lost or repeated";
  const auto [replayed, worst] = compare(run);
  EXPECT_EQ(replayed, 0);
  EXPECT_EQ(worst, 0.0);
  expect_final(dir.path(), /*bitwise=*/true);
  // The rate during the stall against the same run's rate in the 3 s before it.
  const auto count = [&](std::int64_t from, std::int64_t to) {
    return std::count_if(run.begin(), run.end(), [&](const StepLine& l) { return l.time_ms >= from && l.time_ms < to; });
  };
  const double before = static_cast<double>(count(began - 3000, began)) / 3.0;
  const double during = static_cast<double>(count(began, ended)) / (static_cast<double>(ended - began) / 1000.0);
  std::cout << "store stalled " << (ended - began) << " ms: " << during << " steps/s during it, " << before
            << " in the 3 s before (" << (before > 0 ? during / before : 0) << "x)\n";
  EXPECT_GE(during, 0.8 * before) << "training slowed down while the store stalled";
}

TEST_F(TrainerCluster, AStoreStalledForOneAndAHalfLeasesCostsNoStepAndRestartsNoWorker) { stall(1.5); }
TEST_F(TrainerCluster, AStoreStalledForThreeLeasesCostsNoStepAndRestartsNoWorker) { stall(3.0); }

// (g): the store comes back from a snapshot taken ~30 steps before its death (SAVE, then SIGKILL
// and a restart that loads it): the leases in it have run out, the rest is old but not wrong.
TEST_F(TrainerCluster, AStoreRestoredFromAnOlderSnapshotCostsNoStepAndRestartsNoWorker) {
  TempDir dir;
  AgentCluster cluster(options_for(dir.path()));
  cluster.start_agent("n1");
  cluster.start_agent("n2");
  ASSERT_GE(cluster.wait_until([&] { return cluster.step() >= 60; }, 120s), 0) << cluster.all_logs();
  const std::int64_t before = cluster.generation();
  {
    elastic::RedisConnection connection(elastic::parse_redis_url(cluster.redis().url()), 2s, 10s);
    ASSERT_EQ(connection.command({"SAVE"}).type, elastic::RedisReply::Type::kStatus);
  }
  const std::int64_t saved_at = cluster.step();
  ASSERT_GE(cluster.wait_until([&] { return cluster.step() >= saved_at + 30; }, 60s), 0) << cluster.all_logs();
  cluster.redis().restart();  // SIGKILL; the new server loads the snapshot
  const auto codes = wait_for_agents(cluster, {"n1", "n2"}, 240s);
  EXPECT_EQ(codes.at("n1"), 0) << cluster.all_logs();
  EXPECT_EQ(codes.at("n2"), 0);
  expect_no_worker_restarted(cluster.all_logs(), 4);
  EXPECT_GE(cluster.generation(), before) << "a generation number went back";
  const auto run = read_metrics(dir.path() / "metrics.jsonl");
  ASSERT_EQ(run.size(), static_cast<std::size_t>(kSteps)) << "a step was lost or repeated";
  const auto [replayed, worst] = compare(run);
  EXPECT_EQ(replayed, 0);
  expect_final(dir.path(), /*bitwise=*/true);
  std::cout << "snapshot at step " << saved_at << ", restored at step ~" << saved_at + 30 << "\n";
}

// (g) with a membership change between the snapshot and the restart: a third node joins after the
// snapshot, so the restored store holds an older generation without it, and n3's claim and lease
// are missing altogether. Every agent keeps its workers (n1 and n2 take their leases back after
// the rollback, n3 re-establishes its own as after a data loss), and the leader republishes the
// three above every number seen: the workers go on from memory.
TEST_F(TrainerCluster, AStoreRestoredFromASnapshotBeforeANodeJoinedRestartsNoWorker) {
  TempDir dir;
  ClusterOptions options = options_for(dir.path());
  options.nnodes = "1:3";
  AgentCluster cluster(options);
  cluster.start_agent("n1");
  cluster.start_agent("n2");
  ASSERT_GE(cluster.wait_until([&] { return cluster.step() >= 40; }, 120s), 0) << cluster.all_logs();
  {
    elastic::RedisConnection connection(elastic::parse_redis_url(cluster.redis().url()), 2s, 10s);
    ASSERT_EQ(connection.command({"SAVE"}).type, elastic::RedisReply::Type::kStatus);
  }
  const auto saved_time = std::chrono::steady_clock::now();
  const std::int64_t saved = cluster.generation();
  cluster.start_agent("n3");
  ASSERT_GE(cluster.wait_for_members({"n1", "n2", "n3"}, 60s), 0) << cluster.all_logs();
  const std::int64_t joined = cluster.generation();
  const std::int64_t at = cluster.step();
  ASSERT_GE(cluster.wait_until([&] { return cluster.step() >= at + 10; }, 60s), 0) << cluster.all_logs();
  // The snapshot's leases have run out by the restart (its keys keep their absolute expiry): n1 and
  // n2 find theirs gone. (A restart within a lease of the SAVE, which CI once drew, finds them and
  // takes the leader's path alone.)
  std::this_thread::sleep_until(saved_time + options.lease + 500ms);
  ASSERT_LT(cluster.step(), kSteps - 50) << "the job nearly finished before the rollback; the test needs a longer run";
  cluster.redis().restart();  // loads the snapshot: generation `saved`, without n3
  ASSERT_GE(cluster.wait_until([&] { return cluster.generation() > joined; }, 30s), 0) << cluster.all_logs();
  EXPECT_GT(saved, 0);
  const auto codes = wait_for_agents(cluster, {"n1", "n2", "n3"}, 240s);
  for (const auto& [node, code] : codes) EXPECT_EQ(code, 0) << node << "\n" << cluster.all_logs();
  const std::string logs = cluster.all_logs();
  expect_no_worker_restarted(logs, 6);
  EXPECT_NE(logs.find("(it rolled back)"), std::string::npos) << logs;
  const auto run = read_metrics(dir.path() / "metrics.jsonl");
  ASSERT_FALSE(run.empty());
  const auto [replayed, worst] = compare(run, logs);
  EXPECT_EQ(replayed, 0) << "a step was redone";
  std::cout << "snapshot at generation " << saved << "; n3 joined in generation " << joined
            << "; after the restore the job republished above it; largest relative loss difference " << worst << "\n";
}

}  // namespace
}  // namespace hdp::test
