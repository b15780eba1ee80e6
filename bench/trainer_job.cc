#include "bench/trainer_job.h"

#include "common/median.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "agents/process.h"
#include "elastic/job_keys.h"
#include "elastic/job_state.h"
#include "elastic/prefix_store.h"
#include "elastic/redis_store.h"
#include "elastic/redis_url.h"

namespace hdp::bench {

namespace fs = std::filesystem;

std::vector<Line> read_lines(const fs::path& path) {
  std::vector<Line> lines;
  std::ifstream in(path);
  for (std::string text; std::getline(in, text);) {
    try {
      const auto j = nlohmann::json::parse(text);
      Line line{j.at("step"), j.at("world_size"), j.at("time_ms"), j.at("step_ms"), j.at("tokens_per_s")};
      if (j.contains("plan_speeds")) line.plan_speeds = j.at("plan_speeds").get<std::vector<double>>();
      if (j.contains("speeds")) line.speeds = j.at("speeds").get<std::vector<double>>();
      lines.push_back(std::move(line));
    } catch (const std::exception&) {
      // A line being written: read again next time.
    }
  }
  return lines;
}

Job::Job(std::string hdp, std::chrono::milliseconds lease, const std::string& name, std::vector<std::string> train)
    : hdp_(std::move(hdp)),
      lease_(lease),
      dir_(fs::temp_directory_path() / ("hdp-bench-" + name + "-" + std::to_string(getpid()))),
      job_(name),
      train_(std::move(train)) {
  fs::remove_all(dir_);
  fs::create_directories(dir_);
}

std::vector<std::map<std::string, std::string>> Job::events() {
  auto redis = std::make_shared<elastic::RedisStore>(elastic::parse_redis_url(redis_.url()));
  elastic::JobState state(std::make_shared<elastic::PrefixStore>(redis, elastic::keys::job_namespace(job_)));
  std::vector<std::map<std::string, std::string>> out;
  for (const auto& e : state.snapshot(elastic::kEventsKept).events) out.emplace_back(e.fields.begin(), e.fields.end());
  return out;
}

std::string Job::leader_node() {
  auto redis = std::make_shared<elastic::RedisStore>(elastic::parse_redis_url(redis_.url()));
  elastic::PrefixStore store(redis, elastic::keys::job_namespace(job_));
  const auto leader = store.get(elastic::keys::kLeader);
  return leader ? leader->substr(0, leader->find('/')) : std::string();
}

void Job::kill_node_processes(const std::string& node) {
  for (const pid_t pid : workers(node)) kill(pid, SIGKILL);
  kill_agent(node);
}

Job::~Job() {
  for (auto& [node, pid] : agents_) {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
  if (std::getenv("HDP_BENCH_KEEP")) {  // the agents' logs and metrics, to read a timeline
    std::cerr << "kept " << dir_.string() << "\n";
    return;
  }
  std::error_code ignored;
  fs::remove_all(dir_, ignored);
}

double median_step_ms(const std::vector<Line>& lines, std::int64_t from) {
  std::vector<double> ms;
  for (const auto& line : lines) {
    if (line.step >= from) ms.push_back(line.step_ms);
  }
  return ms.empty() ? 0 : median(ms);
}

void Job::start_agent(const std::string& node, int nproc, const std::string& nnodes,
                      const std::vector<std::string>& agent_flags) {
  std::string command = "exec '" + hdp_ + "' agent --job " + job_ + " --redis " + redis_.url() + " --node-id " + node +
                        " --nproc-per-node " + std::to_string(nproc) + " --nnodes " + nnodes +
                        " --settle-ms 300 --lease-ms " + std::to_string(lease_.count());
  for (const auto& flag : agent_flags) command += " '" + flag + "'";
  command += " -- '" + hdp_ + "' train";
  for (const auto& arg : train_) command += " '" + arg + "'";
  command += " --checkpoint-dir '" + (dir_ / "ckpt").string() + "' --metrics-file '" + metrics().string() +
             "' >>'" + (dir_ / (node + ".log")).string() + "' 2>&1";
  agents_[node] = agents::spawn({{"/bin/sh", "-c", command}, {}});
}

void Job::kill_agent(const std::string& node) {
  kill(agents_.at(node), SIGKILL);
  waitpid(agents_.at(node), nullptr, 0);
  agents_[node] = -1;
}

std::vector<pid_t> Job::workers(const std::string& node) const {
  const pid_t a = agents_.at(node);
  std::ifstream children("/proc/" + std::to_string(a) + "/task/" + std::to_string(a) + "/children");
  std::vector<pid_t> pids;
  for (pid_t pid = 0; children >> pid;) pids.push_back(pid);
  return pids;
}

int Job::workers_started() const {
  int n = 0;
  for (const auto& [node, pid] : agents_) {
    std::ifstream in(dir_ / (node + ".log"));
    for (std::string line; std::getline(in, line);) n += line.find(" started (pid ") != std::string::npos;
  }
  return n;
}

bool Job::wait(const std::function<bool(const std::vector<Line>&)>& predicate, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (predicate(read_lines(metrics()))) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

}  // namespace hdp::bench
