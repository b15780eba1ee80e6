// Chaos (label system): a seeded random sequence of faults against a real training job — 3
// `hdp agent` processes x 2 `hdp train` workers (the tiny model, 400 steps, checkpoints every 10)
// on a private redis-server, lease 2 s, collective timeout 3 s:
//   - SIGKILL of a random worker (its agent restarts it), 2 of them;
//   - SIGKILL of a random agent (its workers die with it), started again 0.5-4 s later, 2 of them;
//   - one SIGSTOP of a random worker for 4 s (past the 3 s collective timeout), then SIGCONT;
//   - one redis-server SIGKILL, restarted empty;
//   - one full stop: SIGTERM to every agent (they exit 4, the job says `stopped`), then every agent
//     started again in the same job, which resumes from the final checkpoint.
// The faults come in a seeded order, each once the job has made a seeded number of steps since
// the last one (and at least 5 steps of progress in between, within 60 s). The seed is printed;
// HDP_CHAOS_SEEDS=7,9 replays chosen seeds.
// Asserted: the job completes at step 400 (every agent exits 0); every committed checkpoint left
// verifies, and no restore met a corrupt one (no `error` event of a restore); no worker process
// outlives its agent; no key outside the job's namespace; the events tell the story: after every
// fault a `restore` or `continue` event of a newer generation (read before the next fault, since
// the Redis restart empties the stream), a `stopped` event at the full stop, one `completed`.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <fstream>
#include <iostream>
#include <random>
#include <set>
#include <thread>

#include "checkpoint/checkpoint_root.h"
#include "checkpoint/verify.h"
#include "elastic/job_keys.h"
#include "elastic/job_state.h"
#include "elastic/redis_store.h"
#include "elastic/redis_url.h"
#include "tests/agents/agent_cluster.h"
#include "tests/support/seeded_faults.h"
#include "tests/support/temp_dir.h"

namespace hdp::test {
namespace {

using namespace std::chrono_literals;

constexpr int kSteps = 400;
const std::vector<std::string> kNodes = {"n1", "n2", "n3"};

enum class Fault { kKillWorker, kKillAgent, kStopWorker, kRestartRedis, kFullStop };

std::string name(Fault f) {
  switch (f) {
    case Fault::kKillWorker: return "SIGKILL a worker";
    case Fault::kKillAgent: return "SIGKILL an agent";
    case Fault::kStopWorker: return "SIGSTOP a worker for 4 s";
    case Fault::kRestartRedis: return "restart redis-server empty";
    case Fault::kFullStop: return "stop every agent, then start them again";
  }
  return "?";
}

// Whether `pid` still runs (a zombie left to init does not count: it holds no resources but its pid).
bool alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const auto state = line.rfind(") ");
  return state != std::string::npos && state + 2 < line.size() && line[state + 2] != 'Z' && line[state + 2] != 'X';
}

std::vector<int> chaos_seeds() {
  const char* chosen = std::getenv("HDP_CHAOS_SEEDS");
  if (!chosen) return {1};
  std::vector<int> seeds;
  std::stringstream text(chosen);
  for (std::string item; std::getline(text, item, ',');) {
    if (!item.empty()) seeds.push_back(std::stoi(item));
  }
  return seeds;
}

void run_seed(int seed) {
  std::cout << "chaos seed " << seed << " (HDP_CHAOS_SEEDS=" << seed << " replays it)" << std::endl;
  std::mt19937 rng(static_cast<unsigned>(seed));
  TempDir dir;
  ClusterOptions o;
  o.nnodes = "1:3";
  o.nproc = 2;
  o.train_args = {"--model", "tiny", "--steps", std::to_string(kSteps), "--context", "128", "--capacity", "128",
                  "--batch-tokens", "1024", "--lr", "3e-3", "--warmup-steps", "10", "--seed", "5",
                  "--checkpoint-dir", (dir.path() / "ckpt").string(), "--checkpoint-every", "10",
                  "--timeout-ms", "3000", "--threads", "1", "--log-every", "50"};
  AgentCluster cluster(o);
  for (const auto& node : kNodes) cluster.start_agent(node);
  ASSERT_GE(cluster.wait_until([&] { return cluster.step() >= 10; }, 90s), 0) << cluster.all_logs();

  std::vector<Fault> faults = {Fault::kKillWorker, Fault::kKillWorker, Fault::kKillAgent, Fault::kKillAgent,
                               Fault::kStopWorker, Fault::kRestartRedis, Fault::kFullStop};
  std::shuffle(faults.begin(), faults.end(), rng);
  std::set<pid_t> workers_seen;
  auto note_workers = [&] {
    for (const auto& node : kNodes) {
      if (!cluster.agent(node).running()) continue;
      for (pid_t pid : cluster.worker_pids(node)) workers_seen.insert(pid);
    }
  };
  std::string timeline;
  // Whether the events since `before` tell that training went on after a fault: a `restore` or
  // `continue` of a generation newer than `before`.
  auto told = [&](std::int64_t before, const char* also) {
    elastic::JobState job(cluster.store());
    bool resumed = false, other = also == nullptr;
    for (const auto& e : job.snapshot(elastic::kEventsKept).events) {
      std::string type;
      std::int64_t generation = 0;
      for (const auto& [k, v] : e.fields) {
        if (k == "type") type = v;
        if (k == "generation") generation = std::stoll(v);
      }
      resumed = resumed || ((type == "restore" || type == "continue") && generation > before);
      other = other || (also && type == also);
    }
    return resumed && other;
  };
  for (const Fault fault : faults) {
    const std::int64_t from = cluster.step();
    const std::int64_t at = from + draw_uniform(rng, 5, 25);
    ASSERT_GE(cluster.wait_until([&] { return cluster.step() >= at; }, 60s), 0)
        << "no progress to step " << at << " after: " << timeline << "\n" << cluster.all_logs();
    note_workers();
    const std::int64_t generation_before = cluster.generation();
    const std::string node = kNodes[static_cast<std::size_t>(draw_uniform(rng, 0, 2))];
    timeline += "\n  step " + std::to_string(cluster.step()) + ": " + name(fault) + " (" + node + ")";
    std::cout << "chaos: step " << cluster.step() << ": " << name(fault) << " (" << node << ")" << std::endl;
    switch (fault) {
      case Fault::kKillWorker: {
        const auto pids = cluster.worker_pids(node);
        if (!pids.empty()) ::kill(pids[static_cast<std::size_t>(draw_uniform(rng, 0, int(pids.size()) - 1))], SIGKILL);
        break;
      }
      case Fault::kKillAgent: {
        cluster.agent(node).kill();  // workers follow (PR_SET_PDEATHSIG)
        std::this_thread::sleep_for(draw_uniform(rng, 500ms, 4000ms));
        cluster.start_agent(node);
        break;
      }
      case Fault::kStopWorker: {
        const auto pids = cluster.worker_pids(node);
        if (pids.empty()) break;
        const pid_t victim = pids.front();
        ::kill(victim, SIGSTOP);
        std::this_thread::sleep_for(4s);
        ::kill(victim, SIGCONT);
        break;
      }
      case Fault::kRestartRedis:
        cluster.redis().restart();
        break;
      case Fault::kFullStop: {
        for (const auto& n : kNodes) cluster.agent(n).signal(SIGTERM);
        for (const auto& n : kNodes) {
          const auto status = cluster.agent(n).wait_for(60s);
          ASSERT_TRUE(status.has_value()) << n << " did not stop\n" << cluster.all_logs();
          EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 4) << n << ": " << *status;
        }
        EXPECT_EQ(cluster.state()["status"], "stopped") << timeline << "\n" << cluster.all_logs();
        EXPECT_GE(cluster.wait_until([&] { return told(0, "stopped"); }, 1s), 0) << "no `stopped` event";
        for (const auto& n : kNodes) cluster.start_agent(n);
        break;
      }
    }
    // Progress again before the next fault.
    const std::int64_t now = cluster.step();
    ASSERT_GE(cluster.wait_until([&] { return cluster.step() >= std::min<std::int64_t>(now + 5, kSteps); }, 60s), 0)
        << "no progress after: " << timeline << "\n" << cluster.all_logs();
    // The events tell it: training went on in a newer generation, restored or continued.
    EXPECT_GE(cluster.wait_until([&] { return told(generation_before, nullptr); }, 10s), 0)
        << "no restore or continue event after: " << timeline;
  }
  note_workers();

  for (const auto& node : kNodes) {
    const auto status = cluster.agent(node).wait_for(240s);
    ASSERT_TRUE(status.has_value()) << node << " still running; faults:" << timeline << "\n" << cluster.all_logs();
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
        << node << " exit status " << *status << "; faults:" << timeline << "\n" << cluster.all_logs();
  }
  const auto state = cluster.state();
  EXPECT_EQ(state.at("status"), "completed") << timeline;
  EXPECT_EQ(state.at("step"), std::to_string(kSteps));
  EXPECT_EQ(cluster.get(elastic::keys::kOutcome), "completed");

  // Every committed checkpoint verifies; no restore met a corrupt one.
  for (const auto& c : checkpoint::list_committed(dir.path() / "ckpt")) {
    const auto report = checkpoint::verify_checkpoint(c.path);
    EXPECT_TRUE(report.ok()) << c.path;
  }
  elastic::JobState job(cluster.store());
  const auto snapshot = job.snapshot(elastic::kEventsKept);
  std::string story;
  int completed = 0;
  for (const auto& e : snapshot.events) {
    std::string type, line;
    for (const auto& [k, v] : e.fields) {
      if (k == "type") type = v;
      if (k != "time_ms") line += k + "=" + v + " ";
    }
    story += "\n  " + line;
    completed += type == "completed";
    if (type == "error") {
      for (const auto& [k, v] : e.fields) {
        EXPECT_FALSE(k == "operation" && v == "restore") << "a restore skipped a corrupt checkpoint: " << line;
      }
    }
  }
  std::cout << "events since the redis-server restart:" << story << std::endl;
  EXPECT_EQ(completed, 1) << story;

  // No worker outlives its agent; no key outside the job's namespace.
  std::this_thread::sleep_for(500ms);
  for (pid_t pid : workers_seen) {
    EXPECT_FALSE(alive(pid)) << "worker " << pid << " outlived its agent";
  }
  elastic::RedisStore raw(elastic::parse_redis_url(cluster.redis().url()));
  for (const auto& key : raw.keys("")) {
    EXPECT_TRUE(key.rfind(elastic::keys::job_namespace(cluster.job()), 0) == 0) << "key outside the job: " << key;
  }
}

TEST(TrainerChaos, TheJobCompletesThroughASeededSequenceOfFaults) {
  for (int seed : chaos_seeds()) {
    SCOPED_TRACE("chaos seed " + std::to_string(seed));
    run_seed(seed);
  }
}

}  // namespace
}  // namespace hdp::test
