// bench_goodput: goodput under a schedule of failures, hdp beside torchrun, with real processes on
// this machine.
//
// One invocation runs four jobs of the same step count:
//   1. hdp fault-free: a private redis-server, --nodes `hdp agent` processes (--nnodes 2:NODES)
//      with --nproc `hdp train` workers each (the tiny model, seed fixed, --no-speed-aware: the
//      equivalence tests' settings, tests/trainer/trainer_cluster_test.cc);
//   2. hdp under the schedule (bench/goodput_schedule.h: exponential inter-arrival times of mean
//      --mtbf-s from --seed, kinds drawn evenly): node_kill (SIGKILL of the agent and its
//      workers, the node started again --return-s later), worker_kill (one worker; its agent
//      restarts it), node_stop (SIGSTOP of the agent and its workers, SIGCONT after the drawn
//      duration), redis_stall (the redis-server paused for the drawn duration: SIGSTOP, which
//      like DEBUG SLEEP leaves every connection open and answers nothing), drain (`hdp drain`,
//      the node started again --return-s after its agent exits; skipped when it would leave
//      fewer than 3 nodes up, as a drain below the minimum stops the job), spare_join (one more
//      node, standing by while the job is at its maximum; at most once);
//   3. torchrun fault-free: bench/torchrun_goodput.py under `python3 -m torch.distributed.run`
//      (--nnodes NODES, c10d rendezvous on a store of its own, gloo, a checkpoint every 10 steps);
//   4. torchrun under the node kills of the same schedule (the other kinds have no torchrun
//      counterpart that it survives in-process: a stall or a drain ends its workers).
// A fault names no node: the schedule's pick chooses among the nodes up when it comes. Faults
// due after the last step are not applied.
//
// Reported (--json: one object): per system, ETTR (the fault-free step times of the steps kept /
// the wall time from the start of the first step to the end of the last: goodput_schedule.h),
// with the fault-free step time taken from the run's own undisturbed steps (the mean interval
// between a line and the one before, over the undisturbed lines among the 50 either side, a
// checkpoint's stall left out of it, goodput_schedule.h: this machine's load drifts between runs
// by more than the faults cost, so another run's step times are no baseline), and beside it the
// same against the fault-free run's estimates (ettr_against_fault_free_run), the fault-free run's
// ETTR by the same measure as the faulted run's (what a run without faults loses: its start and
// its checkpoints' stalls), both again with the step's own timer as its cost (ettr_step_timer,
// fault_free_ettr_step_timer: the measure of earlier figures, which also counts the loop around
// a step as lost), steps computed twice, each fault applied with the time from it to the next
// step completed, and for hdp the job's own `recovered` events by kind; the
// final loss against the same system's fault-free run (hdp: relative 1e-4, the bound of the
// equivalence tests for runs that changed world size).
//
// Usage: bench_goodput [--json] [--mtbf-s 30] [--steps 600] [--seed 1] [--nodes 4] [--nproc 1]
//                      [--kinds node_kill,...] [--lease-ms 2000] [--return-s 3] [--no-torchrun]
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <thread>

#include "agents/embedded_redis.h"
#include "agents/process.h"
#include "bench/goodput_schedule.h"
#include "bench/trainer_job.h"
#include "common/median.h"
#include "elastic/job_state.h"

namespace {

using namespace std::chrono_literals;
using namespace hdp::bench;
namespace fs = std::filesystem;
using hdp::elastic::now_ms;

constexpr double kLossTolerance = 1e-4;  // relative: trainer_cluster_test's compare()
constexpr int kWindow = 50;              // lines either side: own_step_times()
constexpr int kCheckpointEvery = 10;     // steps, both systems

struct Settings {
  int nodes = 4, nproc = 1, steps = 600, lease_ms = 2000;
  double mtbf_s = 30, return_s = 3, horizon_s = 3600;
  std::uint64_t seed = 1;
  std::vector<std::string> kinds;
  bool json = false, torchrun = true;
  bool standby = false;  // hdp agent --standby-worker
  std::string hdp, python = "/usr/bin/python3", torch_script = HDP_BENCH_SOURCE_DIR "/torchrun_goodput.py";
  std::string model = "tiny";
  int batch_tokens = 4096;
  int timeout_s = 1800;
  std::string keep;  // a folder to copy each run's step lines into
};

// torchrun_goodput.py's model flags for hdp's preset `s.model` (trainer/trainer_config.cc): the
// same vocabulary, width, layers, heads, feed-forward width, context and tokens per step.
std::string torch_shape(const Settings& s) {
  const std::string shape = s.model == "tiny" ? "--width 64 --layers 2 --heads 4 --ffn 192 --context 128"
                                              : "--width 256 --layers 4 --heads 4 --ffn 768 --context 256";
  return shape + " --vocab 256 --batch-tokens " + std::to_string(s.batch_tokens);
}

// What the fault loop drives: an hdp job or a torchrun job.
class Target {
 public:
  virtual ~Target() = default;
  virtual fs::path metrics() const = 0;
  virtual fs::path log(const std::string& node) const = 0;
  virtual void start(const std::string& node) = 0;
  virtual bool signal_node(const std::string& node, int signo) = 0;
  virtual std::optional<int> exited(const std::string& node) = 0;
  virtual std::vector<pid_t> workers(const std::string& node) = 0;
  virtual void pause_store() {}
  virtual void resume_store() {}
  virtual void drain(const std::string&) {}
};

class HdpTarget : public Target {
 public:
  HdpTarget(const Settings& s, const std::string& name, std::vector<std::string> train)
      : s_(s), job_(s.hdp, std::chrono::milliseconds(s.lease_ms), name, std::move(train)) {}
  fs::path metrics() const override { return job_.metrics(); }
  fs::path log(const std::string& node) const override { return job_.log(node); }
  void start(const std::string& node) override {
    job_.start_agent(node, s_.nproc, "2:" + std::to_string(s_.nodes),
                     s_.standby ? std::vector<std::string>{"--standby-worker"} : std::vector<std::string>{});
  }
  bool signal_node(const std::string& node, int signo) override { return job_.agents().signal(node, signo); }
  std::optional<int> exited(const std::string& node) override { return job_.agents().exit_status(node); }
  std::vector<pid_t> workers(const std::string& node) override { return job_.workers(node); }
  void pause_store() override { job_.redis().pause(); }
  void resume_store() override { job_.redis().resume(); }
  void drain(const std::string& node) override {
    const pid_t pid = hdp::agents::spawn(
        {{"/bin/sh", "-c", "exec '" + s_.hdp + "' drain --job " + job_.name() + " --redis " + job_.redis().url() + " " + node + " >/dev/null"}, {}});
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      std::cerr << "hdp drain " << node << ": " << hdp::agents::describe_status(status) << "\n";
  }
  Job& job() { return job_; }

 private:
  const Settings& s_;
  Job job_;
};

// torchrun: a rendezvous store process, and one `torch.distributed.run` agent per node.
class TorchTarget : public Target {
 public:
  TorchTarget(const Settings& s, const std::string& name)
      : s_(s), dir_(fs::temp_directory_path() / ("hdp-bench-" + name + "-" + std::to_string(getpid()))) {
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "ckpt");
    port_ = hdp::agents::free_loopback_port();
    store_ = hdp::agents::spawn({{"/bin/sh", "-c",
                                  "exec '" + s_.python + "' '" + s_.torch_script + "' --store-port " +
                                      std::to_string(port_) + " >>'" + (dir_ / "store.log").string() + "' 2>&1"},
                                 {}});
  }
  ~TorchTarget() override {
    for (const auto& node : agents_.names()) agents_.signal(node, SIGKILL);
    kill(store_, SIGKILL);
    waitpid(store_, nullptr, 0);
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
  fs::path metrics() const override { return dir_ / "metrics.jsonl"; }
  fs::path log(const std::string& node) const override { return dir_ / (node + ".log"); }
  void start(const std::string& node) override {
    // --redirects/--tee: the default "0" reads as no value on Python 3.11 (Std.from_str finds no
    // member 0 among an IntFlag's members) and the agent fails to start its workers.
    const std::string command =
        "exec '" + s_.python + "' -m torch.distributed.run --nnodes " + std::to_string(s_.nodes) +
        " --nproc_per_node " + std::to_string(s_.nproc) + " --rdzv_backend c10d --rdzv_endpoint 127.0.0.1:" +
        std::to_string(port_) + " --rdzv_id goodput --rdzv_conf is_host=false --max_restarts 1000" +
        " --monitor_interval 1 --redirects 1 --tee 2 --log_dir '" + (dir_ / ("logs-" + node)).string() + "' '" +
        s_.torch_script + "' --steps " + std::to_string(s_.steps) + " --checkpoint-every " + std::to_string(kCheckpointEvery) + " --checkpoint-dir '" +
        (dir_ / "ckpt").string() + "' --metrics-file '" + metrics().string() + "' " + torch_shape(s_) + " >>'" +
        (dir_ / (node + ".log")).string() + "' 2>&1";
    agents_.start(node, command);
  }
  bool signal_node(const std::string& node, int signo) override { return agents_.signal(node, signo); }
  std::optional<int> exited(const std::string& node) override { return agents_.exit_status(node); }
  std::vector<pid_t> workers(const std::string& node) override { return agents_.children(node); }

 private:
  const Settings& s_;
  fs::path dir_;
  int port_ = 0;
  pid_t store_ = -1;
  NodeProcesses agents_;  // destroyed before the store
};

struct Applied {
  Fault fault;
  std::string node;     // empty: the store, or nothing to act on
  std::string outcome;  // "applied" or why not
  std::int64_t at_ms = 0;
  double recovery_s = -1;  // to the next step completed after it
};

struct RunResult {
  bool completed = false;
  std::vector<Line> lines;
  std::vector<Applied> faults;
};

// Runs the job until a line for step `steps` appears, applying `schedule` (times from the first
// step line). Nodes: n1..n<nodes>; a spare join adds s1, s2, ...
RunResult drive_run(Target& target, const Settings& s, const std::vector<Fault>& schedule);

// drive_run, and the step lines copied to --keep.
RunResult drive(Target& target, const Settings& s, const std::vector<Fault>& schedule, const std::string& name) {
  RunResult r = drive_run(target, s, schedule);
  if (!s.keep.empty()) {
    fs::create_directories(s.keep);
    std::error_code ignored;
    fs::copy_file(target.metrics(), fs::path(s.keep) / (name + ".jsonl"), fs::copy_options::overwrite_existing, ignored);
  }
  return r;
}

RunResult drive_run(Target& target, const Settings& s, const std::vector<Fault>& schedule) {
  enum class State { kUp, kDown, kStopped, kDraining };
  std::map<std::string, State> nodes;
  for (int i = 1; i <= s.nodes; ++i) {
    const std::string node = "n" + std::to_string(i);
    target.start(node);
    nodes[node] = State::kUp;
  }
  RunResult r;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(s.timeout_s);
  auto expired = [&] { return std::chrono::steady_clock::now() > deadline; };
  for (int exited = 0; read_lines(target.metrics()).empty();) {
    for (auto& [node, state] : nodes) {
      if (state == State::kUp && target.exited(node)) {
        state = State::kDown;
        ++exited;
      }
    }
    if (expired() || exited == s.nodes) {
      std::cerr << "the job did not start; the end of " << target.log("n1") << ":\n";
      std::ifstream in(target.log("n1"));
      std::deque<std::string> tail;
      for (std::string line; std::getline(in, line);) {
        tail.push_back(line);
        if (tail.size() > 20) tail.pop_front();
      }
      for (const auto& line : tail) std::cerr << "  " << line << "\n";
      return r;
    }
    std::this_thread::sleep_for(20ms);
  }
  const std::int64_t t0 = now_ms();
  // Follow-ups: (time, action); an action may schedule more.
  std::multimap<std::int64_t, std::function<void()>> later;
  std::set<std::string> draining;
  int spares = 0;
  std::size_t next = 0;
  auto up = [&] {
    std::vector<std::string> list;
    for (const auto& [node, state] : nodes) {
      if (state == State::kUp) list.push_back(node);
    }
    return list;
  };
  std::function<void(const std::string&, std::int64_t)> poll_drain = [&](const std::string& node, std::int64_t until) {
    if (target.exited(node)) {
      later.emplace(now_ms() + static_cast<std::int64_t>(s.return_s * 1000), [&, node] {
        target.start(node);
        nodes[node] = State::kUp;
      });
    } else if (now_ms() > until) {
      std::cerr << node << " did not leave within 60 s of its drain: SIGKILLed\n";
      target.signal_node(node, SIGKILL);
      target.start(node);
      nodes[node] = State::kUp;
    } else {
      later.emplace(now_ms() + 50, [&, node, until] { poll_drain(node, until); });
    }
  };
  while (!expired()) {
    r.lines = read_lines(target.metrics());
    if (!r.lines.empty() && std::any_of(r.lines.begin(), r.lines.end(), [&](const Line& l) { return l.step >= s.steps; })) {
      r.completed = true;
      break;
    }
    // An agent that exited on its own (not drained) is reported and left out.
    bool any_up = false;
    for (auto& [node, state] : nodes) {
      if (state == State::kUp) {
        if (const auto status = target.exited(node)) {
          std::cerr << node << " exited on its own (" << hdp::agents::describe_status(*status) << ")\n";
          state = State::kDown;
        }
      }
      any_up = any_up || state != State::kDown;
    }
    if (!any_up && later.empty()) {
      std::cerr << "every node is down and none is coming back: the run ends unfinished\n";
      break;
    }
    const std::int64_t now = now_ms();
    while (!later.empty() && later.begin()->first <= now) {
      auto action = std::move(later.begin()->second);
      later.erase(later.begin());
      action();
    }
    if (next < schedule.size() && now >= t0 + static_cast<std::int64_t>(schedule[next].at_s * 1000)) {
      const Fault& f = schedule[next++];
      Applied a{f, "", "applied", now_ms()};
      const auto live = up();
      const auto pick = [&]() -> std::string {
        return live.empty() ? std::string() : live[pick_index(f.pick, static_cast<int>(live.size()))];
      };
      const auto in = [&](double seconds) { return now_ms() + static_cast<std::int64_t>(seconds * 1000); };
      switch (f.kind) {
        case FaultKind::kNodeKill:
        case FaultKind::kNodeStop: {
          // Down for a while: killed and started again, or stopped and continued.
          const bool kill_it = f.kind == FaultKind::kNodeKill;
          a.node = pick();
          if (a.node.empty()) {
            a.outcome = "skipped: no node up";
            break;
          }
          target.signal_node(a.node, kill_it ? SIGKILL : SIGSTOP);
          nodes[a.node] = kill_it ? State::kDown : State::kStopped;
          later.emplace(in(kill_it ? s.return_s : f.duration_s), [&, kill_it, node = a.node] {
            if (kill_it) {
              target.start(node);
            } else {
              target.signal_node(node, SIGCONT);
            }
            nodes[node] = State::kUp;
          });
          break;
        }
        case FaultKind::kWorkerKill: {
          a.node = pick();
          const auto pids = a.node.empty() ? std::vector<pid_t>{} : target.workers(a.node);
          if (pids.empty()) {
            a.outcome = "skipped: no worker running";
            break;
          }
          kill(pids[pick_index(f.pick, static_cast<int>(pids.size()))], SIGKILL);
          break;
        }
        case FaultKind::kRedisStall:
          a.node = "redis";
          target.pause_store();
          later.emplace(in(f.duration_s), [&] { target.resume_store(); });
          break;
        case FaultKind::kDrain:
          if (live.size() < 3) {
            a.outcome = "skipped: fewer than 3 nodes up";
            break;
          }
          a.node = pick();
          target.drain(a.node);
          nodes[a.node] = State::kDraining;
          poll_drain(a.node, in(60));
          break;
        case FaultKind::kSpareJoin:
          a.node = "s" + std::to_string(++spares);
          target.start(a.node);
          nodes[a.node] = State::kUp;
          break;
      }
      r.faults.push_back(a);
    }
    std::this_thread::sleep_for(20ms);
  }
  // A fault still in force at the end is lifted, so that nothing is left stopped.
  for (const auto& [node, state] : nodes) {
    if (state == State::kStopped) target.signal_node(node, SIGCONT);
  }
  target.resume_store();
  for (Applied& a : r.faults) {
    for (const Line& l : r.lines) {
      if (a.outcome == "applied" && l.time_ms > a.at_ms) {
        a.recovery_s = (l.time_ms - a.at_ms) / 1000.0;
        break;
      }
    }
  }
  return r;
}

std::vector<StepTime> step_times(const std::vector<Line>& lines) {
  std::vector<StepTime> out;
  for (const Line& l : lines) out.push_back({l.step, l.time_ms, l.step_ms, l.generation, l.world});
  return out;
}

double loss_at(const std::vector<Line>& lines, std::int64_t step) {
  double loss = NAN;
  for (const Line& l : lines) {
    if (l.step == step) loss = l.loss;  // the last run of the step
  }
  return loss;
}

// One system's pair of runs, reported.
nlohmann::json report(const RunResult& clean, const RunResult& faulted, int steps) {
  nlohmann::json out = {{"completed", clean.completed && faulted.completed}};
  if (clean.lines.empty() || faulted.lines.empty()) return out;
  const std::vector<StepTime> clean_steps = step_times(clean.lines), faulted_steps = step_times(faulted.lines);
  // Both runs by the same measure: each against its own undisturbed steps (goodput_schedule.h).
  const auto own = [](const std::vector<StepTime>& run, StepCost cost) {
    return own_step_times(run, kWindow, cost, kCheckpointEvery);
  };
  const auto clean_own = own(clean_steps, StepCost::kInterval);
  const auto base = run_goodput(clean_steps, clean_own);
  const auto against_clean = run_goodput(faulted_steps, clean_own);
  const auto g = run_goodput(faulted_steps, own(faulted_steps, StepCost::kInterval));
  const auto base_timer = run_goodput(clean_steps, own(clean_steps, StepCost::kTimer));
  const auto g_timer = run_goodput(faulted_steps, own(faulted_steps, StepCost::kTimer));
  const double a = loss_at(clean.lines, steps), b = loss_at(faulted.lines, steps);
  std::vector<double> ms;
  for (const Line& l : clean.lines) ms.push_back(l.step_ms);
  out.update({{"ettr", g.ettr},
              {"ettr_against_fault_free_run", against_clean.ettr},
              {"fault_free_ettr", base.ettr},
              {"ettr_step_timer", g_timer.ettr},
              {"fault_free_ettr_step_timer", base_timer.ettr},
              {"wall_s", g.wall_ms / 1000},
              {"fault_free_wall_s", base.wall_ms / 1000},
              {"productive_s", g.productive_ms / 1000},
              {"median_step_ms", hdp::median(ms)},
              {"last_step", g.last_step},
              {"steps_computed_twice", g.recomputed_steps},
              {"final_loss", b},
              {"fault_free_final_loss", a},
              {"final_loss_relative_difference", std::abs(b - a) / std::abs(a)},
              {"faults", nlohmann::json::array()}});
  std::map<std::string, std::vector<double>> by_kind;
  for (const Applied& f : faulted.faults) {
    out["faults"].push_back({{"at_s", f.fault.at_s},
                             {"kind", kind_name(f.fault.kind)},
                             {"node", f.node},
                             {"duration_s", f.fault.duration_s},
                             {"outcome", f.outcome},
                             {"to_next_step_s", f.recovery_s}});
    if (f.recovery_s >= 0) by_kind[kind_name(f.fault.kind)].push_back(f.recovery_s);
  }
  for (const auto& [kind, times] : by_kind) {
    out["to_next_step_by_kind"][kind] = {{"count", times.size()},
                                         {"median_s", hdp::median(times)},
                                         {"max_s", *std::max_element(times.begin(), times.end())}};
  }
  return out;
}

std::vector<std::string> hdp_train_args(const Settings& s) {
  const std::string context = s.model == "tiny" ? "128" : "256";
  return {"--model", s.model, "--steps", std::to_string(s.steps), "--context", context, "--capacity", context,
          "--batch-tokens", std::to_string(s.batch_tokens), "--lr", "3e-3", "--warmup-steps", "10", "--seed", "77", "--checkpoint-every", std::to_string(kCheckpointEvery),
          "--timeout-ms", "10000", "--threads", "1", "--log-every", "100", "--no-speed-aware"};
}

void print_text(const nlohmann::json& out) {
  std::printf("bench_goodput: MTBF %.0f s, seed %llu, %d nodes x %d workers, %d steps\n", out["mtbf_s"].get<double>(),
              out["seed"].get<unsigned long long>(), out["nodes"].get<int>(), out["nproc"].get<int>(),
              out["steps"].get<int>());
  for (const char* system : {"hdp", "torchrun"}) {
    if (!out.contains(system) || !out[system].contains("ettr")) continue;
    const auto& r = out[system];
    std::printf("%-9s ETTR %.3f (against the fault-free run's steps %.3f; that run's own %.3f; by the step timer %.3f, "
                "fault-free %.3f), wall %.1f s (fault-free %.1f s), %lld steps computed twice, "
                "final loss %.6f vs %.6f fault-free (relative %.1e)\n",
                system, r["ettr"].get<double>(), r["ettr_against_fault_free_run"].get<double>(),
                r["fault_free_ettr"].get<double>(), r["ettr_step_timer"].get<double>(),
                r["fault_free_ettr_step_timer"].get<double>(), r["wall_s"].get<double>(),
                r["fault_free_wall_s"].get<double>(), r["steps_computed_twice"].get<long long>(),
                r["final_loss"].get<double>(), r["fault_free_final_loss"].get<double>(),
                r["final_loss_relative_difference"].get<double>());
    for (const auto& f : r["faults"]) {
      std::printf("  %7.1f s %-12s %-6s %-28s next step after %.2f s\n", f["at_s"].get<double>(),
                  f["kind"].get<std::string>().c_str(), f["node"].get<std::string>().c_str(),
                  f["outcome"].get<std::string>().c_str(), f["to_next_step_s"].get<double>());
    }
  }
  if (out.contains("hdp") && out["hdp"].contains("recoveries")) {
    std::printf("hdp's recovered events: ");
    for (const auto& [kind, v] : out["hdp"]["recoveries"].items()) {
      std::printf("%s x%d (median %.2f s, max %.2f s)  ", kind.c_str(), v["count"].get<int>(),
                  v["median_s"].get<double>(), v["max_s"].get<double>());
    }
    std::printf("\n");
  }
}

}  // namespace

// torchrun's half needs PyTorch in --python: asked before any run, so that a machine without it
// is told at once rather than after the hdp runs. True when `python -c 'import
// torch.distributed.run'` exits 0.
bool python_has_torchrun(const std::string& python) {
  const pid_t pid = hdp::agents::spawn(
      {{"/bin/sh", "-c", "exec '" + python + "' -c 'import torch.distributed.run' >/dev/null 2>&1"}, {}});
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

int main(int argc, char** argv) {
  CLI::App app{"bench_goodput: ETTR under a seeded failure schedule, hdp and torchrun, real processes on this machine"};
  Settings s;
  s.hdp = (fs::path(argv[0]).parent_path() / "hdp").string();
  app.add_flag("--json", s.json, "One JSON object");
  app.add_option("--mtbf-s", s.mtbf_s, "Mean time between failures (exponential)")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--steps", s.steps, "Steps of each run")->check(CLI::Range(20, 1000000))->capture_default_str();
  app.add_option("--seed", s.seed, "The schedule's seed")->capture_default_str();
  app.add_option("--nodes", s.nodes, "Nodes (agents) of the job")->check(CLI::Range(3, 64))->capture_default_str();
  app.add_option("--nproc", s.nproc, "Workers per node")->check(CLI::Range(1, 64))->capture_default_str();
  app.add_option("--kinds", s.kinds, "Fault kinds drawn (default: all)")
      ->delimiter(',')
      ->check(CLI::IsMember({"node_kill", "worker_kill", "node_stop", "redis_stall", "drain", "spare_join"}));
  app.add_option("--lease-ms", s.lease_ms, "hdp's node lease")->capture_default_str();
  app.add_option("--return-s", s.return_s, "A killed or drained node starts again after this long")->capture_default_str();
  app.add_flag("!--no-torchrun", s.torchrun, "Run hdp only");
  app.add_flag("--standby-worker", s.standby,
               "hdp's agents keep a standby worker (hdp agent --standby-worker): a killed worker's slot goes to it");
  app.add_option("--hdp", s.hdp, "The hdp binary")->capture_default_str();
  app.add_option("--python", s.python, "The python with Debian's python3-torch")->capture_default_str();
  app.add_option("--torch-script", s.torch_script, "bench/torchrun_goodput.py")->capture_default_str();
  app.add_option("--model", s.model, "hdp's preset, and torchrun's model of its shape")
      ->check(CLI::IsMember({"tiny", "demo"}))
      ->capture_default_str();
  app.add_option("--batch-tokens", s.batch_tokens, "Tokens per step (both systems)")->capture_default_str();
  app.add_option("--timeout-s", s.timeout_s, "Longest a run may take")->capture_default_str();
  app.add_option("--keep", s.keep, "A folder to copy each run's step lines into (<run>.jsonl)");
  CLI11_PARSE(app, argc, argv);
  if (s.torchrun && !python_has_torchrun(s.python)) {
    std::cerr << "bench_goodput: " << s.python
              << " cannot import torch.distributed.run: install Debian's python3-torch (bash scripts/install-deps.sh "
                 "--bench), name another --python, or run hdp alone (--no-torchrun)\n";
    return 2;
  }

  ScheduleOptions o{.mtbf_s = s.mtbf_s, .horizon_s = s.horizon_s, .seed = s.seed};
  if (!s.kinds.empty()) {
    o.kinds.clear();
    for (const auto& k : s.kinds) o.kinds.push_back(*kind_from_name(k));
  }
  const auto schedule = make_schedule(o);
  nlohmann::json out = {{"mtbf_s", s.mtbf_s}, {"seed", s.seed},  {"nodes", s.nodes},       {"nproc", s.nproc},
                        {"steps", s.steps},   {"model", s.model}, {"batch_tokens", s.batch_tokens}, {"lease_ms", s.lease_ms}, {"standby_worker", s.standby}, {"return_s", s.return_s},
                        {"loss_tolerance", kLossTolerance}};
  bool ok = true;
  {
    RunResult clean, faulted;
    {
      HdpTarget t(s, "goodput-clean", hdp_train_args(s));
      clean = drive(t, s, {}, "hdp-fault-free");
    }
    std::vector<hdp::elastic::RecoveryRecord> recoveries;
    {
      HdpTarget t(s, "goodput-faults", hdp_train_args(s));
      faulted = drive(t, s, schedule, "hdp-faults");
      try {
        recoveries = t.job().recoveries(1000);
      } catch (const std::exception& e) {
        std::cerr << "cannot read the job's events: " << e.what() << "\n";
      }
    }
    out["hdp"] = report(clean, faulted, s.steps);
    std::map<std::string, std::vector<double>> by_kind;
    std::int64_t lost = 0;
    for (const auto& r : recoveries) {
      by_kind[r.kind].push_back(r.seconds);
      lost += r.lost_steps;
    }
    for (const auto& [kind, times] : by_kind) {
      out["hdp"]["recoveries"][kind] = {{"count", times.size()},
                                        {"median_s", hdp::median(times)},
                                        {"max_s", *std::max_element(times.begin(), times.end())},
                                        {"seconds", times}};
    }
    out["hdp"]["recovered_events_lost_steps"] = lost;
    const bool equal = out["hdp"].value("final_loss_relative_difference", 1.0) <= kLossTolerance;
    out["hdp"]["final_loss_within_tolerance"] = equal;
    ok = ok && out["hdp"]["completed"].get<bool>() && equal;
  }
  if (s.torchrun) {
    RunResult clean, faulted;
    {
      TorchTarget t(s, "goodput-torch-clean");
      clean = drive(t, s, {}, "torchrun-fault-free");
    }
    {
      TorchTarget t(s, "goodput-torch-faults");
      faulted = drive(t, s, only_kinds(schedule, {FaultKind::kNodeKill}), "torchrun-faults");
    }
    out["torchrun"] = report(clean, faulted, s.steps);
    ok = ok && out["torchrun"]["completed"].get<bool>();
  }
  if (s.json) {
    std::cout << out.dump(2) << "\n";
  } else {
    print_text(out);
  }
  return ok ? 0 : 1;
}
