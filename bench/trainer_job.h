// File: bench/trainer_job.h
//
// A job of real processes for the trainer's benchmarks: a private redis-server, `hdp agent`
// processes (their output in files) with `hdp train` workers that append one line per step to a
// metrics file (--metrics-file), which the benchmark reads.
#pragma once

#include <sys/types.h>

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agents/embedded_redis.h"
#include "elastic/goodput.h"

namespace hdp::bench {

// One line of the metrics file.
struct Line {
  std::int64_t step = 0;
  int world = 0;
  std::int64_t time_ms = 0;  // wall clock when the line was written (after the step's reports)
  double step_ms = 0;
  double tokens_per_s = 0;
  double loss = 0;
  std::vector<double> plan_speeds;  // the speeds the step was planned with, per rank
  std::vector<double> speeds;       // each rank's measured speed relative to the median
  std::int64_t generation = 0;      // 0 when the line has none (torchrun's)
  std::int64_t start_ms = 0;        // wall clock when the step started; 0: the line has none

  // When the step started and ended: from start_ms where the line has it, else from time_ms
  // (then later by the reports rank 0 makes between the step and its line).
  double started() const { return start_ms > 0 ? static_cast<double>(start_ms) : static_cast<double>(time_ms) - step_ms; }
  double ended() const { return start_ms > 0 ? static_cast<double>(start_ms) + step_ms : static_cast<double>(time_ms); }
};

// The lines written so far (a line still being written is left for the next read).
std::vector<Line> read_lines(const std::filesystem::path& path);
// The children of process `pid` (an agent's workers).
std::vector<pid_t> child_pids(pid_t pid);
// The median step time of the lines of step `from` on (ms); 0 when there are none.
double median_step_ms(const std::vector<Line>& lines, std::int64_t from);

// Processes by node name, each a `/bin/sh -c` command that execs the node's agent (hdp's, or
// torchrun's); a signal reaches the agent and its children (its workers).
class NodeProcesses {
 public:
  NodeProcesses() = default;
  ~NodeProcesses();  // SIGKILLs those left, with their children
  NodeProcesses(const NodeProcesses&) = delete;
  NodeProcesses& operator=(const NodeProcesses&) = delete;

  void start(const std::string& node, const std::string& command);
  pid_t pid(const std::string& node) const { return pids_.at(node); }  // -1 once it exited or was killed
  std::vector<pid_t> children(const std::string& node) const { return child_pids(pid(node)); }
  // `signo` to the agent (and its children when `children`); SIGKILL reaps the agent. False when
  // it is not running.
  bool signal(const std::string& node, int signo, bool children = true);
  // Its wait status once it has exited (reaped then), nullopt while it runs.
  std::optional<int> exit_status(const std::string& node);
  std::vector<std::string> names() const;

 private:
  std::map<std::string, pid_t> pids_;
};

class Job {
 public:
  // `train` is the worker's flags after `hdp train` (the metrics file and checkpoint directory
  // are added). Files live in a fresh directory under the system's temp dir, removed at the end
  // (kept, and named on stderr, when HDP_BENCH_KEEP is set).
  Job(std::string hdp, std::chrono::milliseconds lease, const std::string& name, std::vector<std::string> train);
  ~Job();  // SIGKILLs the agents that are left and their workers
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  agents::EmbeddedRedis& redis() { return redis_; }
  std::filesystem::path metrics() const { return dir_ / "metrics.jsonl"; }
  std::filesystem::path log(const std::string& node) const { return dir_ / (node + ".log"); }

  // `agent_flags` go to `hdp agent` before the worker command (e.g. --metrics-port P).
  void start_agent(const std::string& node, int nproc, const std::string& nnodes,
                   const std::vector<std::string>& agent_flags = {});
  pid_t agent(const std::string& node) const { return agents_.pid(node); }
  void kill_agent(const std::string& node);
  // SIGKILLs the node's agent and its workers together (a node's processes gone, its machine up).
  void kill_node_processes(const std::string& node) { agents_.signal(node, SIGKILL, true); }
  // The node whose agent holds the leader lease ("" when none does).
  std::string leader_node();
  NodeProcesses& agents() { return agents_; }
  // The agent's worker processes (its children, less a standby worker not yet given a slot).
  std::vector<pid_t> workers(const std::string& node) const;
  // Workers the agents started, counted in their logs (a standby worker when it is given a slot).
  int workers_started() const;
  // The job's events (elastic/job_state.h), oldest first, each as its fields.
  std::vector<std::map<std::string, std::string>> events();
  // The job's last `count` recoveries (its `recovered` events: elastic/goodput.h).
  std::vector<elastic::RecoveryRecord> recoveries(std::size_t count);
  const std::string& name() const { return job_; }
  // Polls the metrics file every 20 ms until `predicate` holds; false after `timeout`.
  bool wait(const std::function<bool(const std::vector<Line>&)>& predicate, std::chrono::seconds timeout);

 private:
  std::vector<elastic::StreamEntry> event_entries();

  std::string hdp_;
  std::chrono::milliseconds lease_;
  std::filesystem::path dir_;
  std::string job_;
  std::vector<std::string> train_;
  agents::EmbeddedRedis redis_;
  NodeProcesses agents_;
};

}  // namespace hdp::bench
