#include "bench/trainer_job.h"

#include "common/median.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <set>
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
      Line line{j.at("step"), j.at("world_size"), j.at("time_ms"), j.at("step_ms"), j.at("tokens_per_s"), j.value("loss", 0.0)};
      line.generation = j.value("generation", std::int64_t{0});
      line.start_ms = j.value("start_ms", std::int64_t{0});
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

std::vector<elastic::StreamEntry> Job::event_entries() {
  auto redis = std::make_shared<elastic::RedisStore>(elastic::parse_redis_url(redis_.url()));
  elastic::JobState state(std::make_shared<elastic::PrefixStore>(redis, elastic::keys::job_namespace(job_)));
  return state.snapshot(elastic::kEventsKept).events;
}

std::vector<std::map<std::string, std::string>> Job::events() {
  std::vector<std::map<std::string, std::string>> out;
  for (const auto& e : event_entries()) out.emplace_back(e.fields.begin(), e.fields.end());
  return out;
}

std::string Job::leader_node() {
  auto redis = std::make_shared<elastic::RedisStore>(elastic::parse_redis_url(redis_.url()));
  elastic::PrefixStore store(redis, elastic::keys::job_namespace(job_));
  const auto leader = store.get(elastic::keys::kLeader);
  return leader ? leader->substr(0, leader->rfind('/')) : std::string();
}

std::vector<elastic::RecoveryRecord> Job::recoveries(std::size_t count) {
  return elastic::recent_recoveries(event_entries(), count);
}

Job::~Job() {
  for (const auto& node : agents_.names()) agents_.signal(node, SIGKILL);
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
  agents_.start(node, command);
}

void Job::kill_agent(const std::string& node) { agents_.signal(node, SIGKILL, false); }

std::vector<pid_t> child_pids(pid_t a) {
  std::ifstream children("/proc/" + std::to_string(a) + "/task/" + std::to_string(a) + "/children");
  std::vector<pid_t> pids;
  for (pid_t pid = 0; children >> pid;) pids.push_back(pid);
  return pids;
}

std::vector<pid_t> Job::workers(const std::string& node) const {
  // The agent's children less its standby worker, from its log: the pid of a "standby worker
  // started (pid P)" line is a worker once a "worker N is the standby worker (pid P)" line follows.
  // The children first: a standby started after them and logged before the log is read is then
  // no child of the list, while one started before them is in the log.
  const std::vector<pid_t> children = agents_.children(node);
  std::set<pid_t> standby;
  std::ifstream in(log(node));
  auto pid_after = [](const std::string& line, std::size_t at) {
    return static_cast<pid_t>(std::atol(line.c_str() + at + std::strlen("(pid ")));
  };
  for (std::string line; std::getline(in, line);) {
    if (const auto at = line.find("standby worker started (pid "); at != std::string::npos) {
      standby.insert(pid_after(line, line.find("(pid ", at)));
    } else if (const auto taken = line.find(" is the standby worker (pid "); taken != std::string::npos) {
      standby.erase(pid_after(line, line.find("(pid ", taken)));
    }
  }
  std::vector<pid_t> out;
  for (pid_t pid : children) {
    if (!standby.contains(pid)) out.push_back(pid);
  }
  return out;
}

NodeProcesses::~NodeProcesses() {
  for (const auto& node : names()) signal(node, SIGKILL);
}

void NodeProcesses::start(const std::string& node, const std::string& command) {
  pids_[node] = agents::spawn({{"/bin/sh", "-c", command}, {}});
}

std::vector<std::string> NodeProcesses::names() const {
  std::vector<std::string> out;
  for (const auto& [node, pid] : pids_) out.push_back(node);
  return out;
}

bool NodeProcesses::signal(const std::string& node, int signo, bool children) {
  const auto it = pids_.find(node);
  if (it == pids_.end() || it->second <= 0) return false;
  if (children) {
    for (const pid_t w : child_pids(it->second)) kill(w, signo);
  }
  kill(it->second, signo);
  if (signo == SIGKILL) {
    waitpid(it->second, nullptr, 0);
    it->second = -1;
  }
  return true;
}

std::optional<int> NodeProcesses::exit_status(const std::string& node) {
  const auto it = pids_.find(node);
  if (it == pids_.end() || it->second <= 0) return std::nullopt;
  int status = 0;
  if (waitpid(it->second, &status, WNOHANG) != it->second) return std::nullopt;
  it->second = -1;
  return status;
}

int Job::workers_started() const {
  int n = 0;
  for (const auto& node : agents_.names()) {
    std::ifstream in(log(node));
    // A slot's process started, or a standby worker given a slot (not a standby's own start).
    for (std::string line; std::getline(in, line);) {
      n += (line.find(" started (pid ") != std::string::npos && line.find("standby worker started") == std::string::npos) ||
           line.find(" is the standby worker (pid ") != std::string::npos;
    }
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
