#include "tests/agents/agent_cluster.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/error.h"
#include "elastic/job_keys.h"
#include "elastic/prefix_store.h"
#include "elastic/redis_store.h"

namespace hdp::test {

std::vector<std::string> tiny_trainer_args(const std::string& checkpoints, std::int64_t batch_tokens,
                                           int checkpoint_every, std::vector<std::string> extra) {
  std::vector<std::string> args = {"--model",          "tiny",       "--steps",    "1000000", "--context", "128",
                                   "--capacity",       "128",        "--batch-tokens", std::to_string(batch_tokens),
                                   "--data",           "synthetic:github", "--threads", "1",
                                   "--checkpoint-dir", checkpoints,  "--checkpoint-every", std::to_string(checkpoint_every),
                                   "--timeout-ms",     "3000",       "--log-every", "50"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

std::vector<std::string> node_names(const elastic::Generation& generation) {
  std::vector<std::string> nodes;
  for (const auto& member : generation.members) nodes.push_back(member.node);
  return nodes;
}

AgentCluster::AgentCluster(ClusterOptions options)
    : options_(std::move(options)),
      dir_("hdp-cluster"),
      redis_(options_.redis_url.empty()
                 ? std::make_unique<RedisServer>(RedisServerOptions{.extra_args = options_.redis_args})
                 : nullptr) {
  job_ = "test-" + dir_.path().filename().string().substr(12);
}

AgentCluster::~AgentCluster() {
  for (auto& [node, process] : agents_) process->kill();  // workers follow (PR_SET_PDEATHSIG)
}

std::string AgentCluster::hdp() const {
  const char* dir = std::getenv("HDP_BIN_DIR");
  return std::string(dir ? dir : "build/bin") + "/hdp";
}

ChildProcess& AgentCluster::start_agent(const std::string& node, std::vector<std::string> extra,
                                       std::vector<std::string> env, std::optional<int> nproc) {
  std::vector<std::string> argv = {hdp(), "agent", "--job", job_, "--redis", redis_url(), "--node-id", node,
                                   "--nproc-per-node", std::to_string(nproc.value_or(options_.nproc)),
                                   "--lease-ms", std::to_string(options_.lease.count()),
                                   "--settle-ms", std::to_string(options_.settle.count()),
                                   "--nnodes", options_.nnodes, "--drain-timeout", "5"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  if (!options_.train_args.empty()) {
    argv.insert(argv.end(), {"--", hdp(), "train"});
    argv.insert(argv.end(), options_.train_args.begin(), options_.train_args.end());
  } else {
    argv.insert(argv.end(), {"--", hdp(), "train", "--smoke", "--steps", std::to_string(options_.steps), "--step-ms",
                             std::to_string(options_.step_ms), "--timeout-ms",
                             std::to_string(options_.worker_timeout.count())});
  }
  agents_[node] = std::make_unique<ChildProcess>(argv, (dir_.path() / (node + ".log")).string(), std::move(env));
  return *agents_[node];
}

std::vector<pid_t> AgentCluster::worker_pids(const std::string& node) {
  const pid_t agent = agents_.at(node)->pid();
  std::ifstream children("/proc/" + std::to_string(agent) + "/task/" + std::to_string(agent) + "/children");
  std::vector<pid_t> pids;
  for (pid_t pid = 0; children >> pid;) {
    // A child that exited but is not reaped yet (its agent is stopped, or has not run) is no worker.
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    std::getline(stat, line);
    const auto state = line.rfind(") ");
    if (state != std::string::npos && state + 2 < line.size() && line[state + 2] != 'Z') pids.push_back(pid);
  }
  std::sort(pids.begin(), pids.end());
  return pids;
}

std::string AgentCluster::agent_log(const std::string& node) const {
  std::ifstream in(dir_.path() / (node + ".log"));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string AgentCluster::all_logs() const {
  std::string text;
  for (const auto& [node, process] : agents_) text += "==== " + node + "\n" + agent_log(node);
  return text;
}

std::shared_ptr<elastic::Store> AgentCluster::store() {
  elastic::RedisStoreOptions fast;
  fast.retry_timeout = std::chrono::milliseconds(500);
  auto redis = std::make_shared<elastic::RedisStore>(elastic::parse_redis_url(redis_url()), fast);
  return std::make_shared<elastic::PrefixStore>(redis, elastic::keys::job_namespace(job_));
}

std::optional<std::string> AgentCluster::get(const std::string& key) { return store()->get(key); }

std::int64_t AgentCluster::generation() {
  auto value = get(elastic::keys::kGeneration);
  return value ? std::stoll(*value) : 0;
}

std::optional<elastic::Generation> AgentCluster::current() {
  auto s = store();
  auto number = s->get(elastic::keys::kGeneration);
  if (!number) return std::nullopt;
  auto record = s->get(elastic::keys::generation(std::stoll(*number)));
  if (!record) return std::nullopt;
  return elastic::decode_generation(*record, "gen");
}

std::map<std::string, std::string> AgentCluster::state() { return store()->hash_get_all(elastic::keys::kState); }

std::optional<std::string> AgentCluster::leader() { return get(elastic::keys::kLeader); }

std::int64_t AgentCluster::step() {
  auto fields = state();
  return fields.count("step") ? std::stoll(fields["step"]) : 0;
}

std::string AgentCluster::wait_for_dead_agent(const std::vector<std::string>& nodes,
                                              std::chrono::milliseconds timeout) {
  std::string dead;
  wait_until(
      [&] {
        for (const auto& node : nodes) {
          if (!agent(node).running()) dead = node;
        }
        return !dead.empty();
      },
      timeout);
  return dead;
}

double AgentCluster::wait_until(const std::function<bool()>& predicate, std::chrono::milliseconds timeout) {
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < timeout) {
    try {
      if (predicate()) return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    } catch (const Error&) {
      // The store may be down (a test restarting it); keep polling until the deadline.
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}

double AgentCluster::wait_for_members(std::vector<std::string> nodes, std::chrono::milliseconds timeout) {
  std::sort(nodes.begin(), nodes.end());
  return wait_until(
      [&] {
        auto g = current();
        if (!g || g->status != elastic::GenerationStatus::kRunning) return false;
        auto names = node_names(*g);
        std::sort(names.begin(), names.end());
        return names == nodes;
      },
      timeout);
}

void expect_progress(AgentCluster& cluster, std::int64_t steps, std::chrono::milliseconds within) {
  const std::int64_t from = cluster.step();
  EXPECT_GE(cluster.wait_until([&] { return cluster.step() >= from + steps; }, within), 0)
      << "no progress from step " << from << "\n" << cluster.all_logs();
}

void start_training(AgentCluster& cluster, const std::vector<std::string>& nodes) {
  for (const auto& node : nodes) cluster.start_agent(node);
  ASSERT_GE(cluster.wait_for_members(nodes, std::chrono::seconds(15)), 0) << cluster.all_logs();
  // A precondition, not a bound: the workers' start-up (seconds per process under a sanitizer on a
  // loaded machine) comes before the first step.
  expect_progress(cluster, 10, std::chrono::seconds(30));
}

std::vector<std::pair<int, pid_t>> started_workers(const std::string& agent_log) {
  std::vector<std::pair<int, pid_t>> started;
  const std::string marker = "worker ";
  for (std::size_t at = agent_log.find(marker); at != std::string::npos; at = agent_log.find(marker, at + 1)) {
    int slot = -1, pid = -1;
    if (std::sscanf(agent_log.c_str() + at, "worker %d started (pid %d)", &slot, &pid) == 2) {
      started.emplace_back(slot, static_cast<pid_t>(pid));
    }
  }
  return started;
}

}  // namespace hdp::test
