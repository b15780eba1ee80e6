// `hdp run`: the one-machine launcher. Starts a private redis-server on a free loopback port
// (unless --redis is given), N agents with distinct node ids, prints the job id and how to query
// it, reports progress, and on exit stops everything it started. SIGINT/SIGTERM drain the agents;
// a second signal kills them. Exits 0 when the job completed, even if agents were lost on the way.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <iostream>
#include <memory>
#include <thread>

#include "agents/embedded_redis.h"
#include "agents/process.h"
#include "cli/commands.h"
#include "cli/self_executable.h"
#include "cli/exit_codes.h"
#include "common/error.h"
#include "common/log.h"
#include "elastic/job_keys.h"
#include "elastic/job_state.h"
#include "elastic/lease_timing.h"
#include "elastic/membership.h"
#include "elastic/node_registration.h"
#include "elastic/prefix_store.h"
#include "elastic/redis_store.h"

namespace hdp::cli {
namespace {

std::atomic<int> signals_received{0};
void count_signal(int) { ++signals_received; }

struct RunFlags {
  int nodes = 2;
  int nproc = 1;
  std::string redis;
  std::string job;
  std::string nnodes;
  int lease_ms = 5000;
  std::vector<std::string> worker;
};

// One line whenever the job's generation, status or step changes.
class ProgressLine {
 public:
  explicit ProgressLine(std::shared_ptr<elastic::Store> store) : state_(std::move(store)) {}
  void update() {
    try {
      auto s = state_.snapshot(0);
      auto get = [&](const char* k) { return s.state.count(k) ? s.state.at(k) : std::string("-"); };
      std::string line = "generation " + std::to_string(s.generation) + ", world size " +
                         std::to_string(s.members ? s.members->world_size() : 0) + ", status " + get("status") +
                         ", step " + get("step");
      if (line != last_) std::cout << "hdp run: " << line << std::endl;
      last_ = line;
    } catch (const Error& e) {
      log()->debug("hdp run: progress unavailable: {}", e.what());
    }
  }

 private:
  elastic::JobState state_;
  std::string last_;
};

// Whether the job's `outcome` says completed; a store that cannot be read counts as not completed.
bool job_completed(elastic::Store& job_store) {
  try {
    return job_store.get(elastic::keys::kOutcome) == "completed";
  } catch (const Error& e) {
    std::cout << "hdp run: cannot read the job's outcome: " << e.what() << std::endl;
    return false;
  }
}

int run_job(const RunFlags& flags) {
  // The agents derive their timing from the lease (elastic/lease_timing.h); refuse a bad one here,
  // before starting anything.
  elastic::derive_lease_timing(std::chrono::milliseconds(flags.lease_ms), std::nullopt);
  std::unique_ptr<agents::EmbeddedRedis> redis;
  std::string url = flags.redis;
  if (url.empty()) {
    redis = std::make_unique<agents::EmbeddedRedis>();
    url = redis->url();
  }
  const std::string job = flags.job.empty() ? "run-" + elastic::new_incarnation().substr(0, 8) : flags.job;
  elastic::validate_job_id(job);
  const std::string nnodes = flags.nnodes.empty() ? std::to_string(flags.nodes) + ":" + std::to_string(flags.nodes)
                                                  : flags.nnodes;
  elastic::parse_nnodes(nnodes);
  std::cout << "hdp run: job " << job << " on " << url << " with " << flags.nodes << " agent(s) x " << flags.nproc
            << " worker(s)\nhdp run: watch it with: hdp status --job " << job << " --redis " << url << " --watch"
            << std::endl;

  const std::string self = self_executable();
  std::vector<pid_t> agents_running;
  for (int i = 0; i < flags.nodes; ++i) {
    std::vector<std::string> argv = {self, "agent", "--job", job, "--redis", url, "--node-id",
                                     "node" + std::to_string(i), "--nproc-per-node", std::to_string(flags.nproc),
                                     "--nnodes", nnodes, "--lease-ms", std::to_string(flags.lease_ms)};
    if (!flags.worker.empty()) {
      argv.push_back("--");
      argv.insert(argv.end(), flags.worker.begin(), flags.worker.end());
    }
    agents_running.push_back(agents::spawn({argv, {}}));
  }

  struct sigaction action {};
  action.sa_handler = count_signal;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);

  auto job_store = std::make_shared<elastic::PrefixStore>(
      std::make_shared<elastic::RedisStore>(elastic::parse_redis_url(url)), elastic::keys::job_namespace(job));
  ProgressLine progress(job_store);
  int exit_code = kExitOk, forwarded = 0, agents_failed = 0;
  while (!agents_running.empty()) {
    if (signals_received > forwarded) {
      forwarded = signals_received;
      const int signo = forwarded == 1 ? SIGTERM : SIGKILL;
      std::cout << "hdp run: " << (forwarded == 1 ? "draining the agents" : "killing the agents") << std::endl;
      for (pid_t pid : agents_running) kill(pid, signo);
    }
    int status = 0;
    pid_t done = waitpid(-1, &status, WNOHANG);
    if (done > 0) {
      std::erase(agents_running, done);
      const int code = WIFEXITED(status) ? WEXITSTATUS(status) : kExitFailure;
      std::cout << "hdp run: agent pid " << done << " ended (" << agents::describe_status(status) << ")" << std::endl;
      if (code != kExitOk) {
        ++agents_failed;
        if (exit_code == kExitOk) exit_code = code;
      }
      continue;
    }
    progress.update();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  progress.update();
  // The job's outcome decides: losing an agent on the way is what elasticity is for.
  if (job_completed(*job_store)) {
    std::cout << "hdp run: job " << job << " completed";
    if (agents_failed > 0) std::cout << " (" << agents_failed << " agent(s) lost on the way)";
    std::cout << std::endl;
    return kExitOk;
  }
  if (exit_code == kExitOk) exit_code = kExitFailure;  // every agent exited 0, yet no outcome
  std::cout << "hdp run: job " << job << " did not complete; exit code " << exit_code << std::endl;
  return exit_code;
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto flags = std::make_shared<RunFlags>();
  CLI::App* command = app.add_subcommand("run", "Run a whole job on this machine: a private Redis and N agents");
  command->add_option("--nodes", flags->nodes, "Agents to start")->check(CLI::Range(1, 256))->capture_default_str();
  command->add_option("--nproc-per-node", flags->nproc, "Workers per agent")->check(CLI::Range(1, 64))->capture_default_str();
  command->add_option("--redis", flags->redis, "Use this Redis instead of a private one")->envname("HDP_REDIS_URL");
  command->add_option("--job", flags->job, "Job id (default: run-<random>)");
  command->add_option("--nnodes", flags->nnodes, "MIN:MAX for the agents (default: --nodes:--nodes)");
  command->add_option("--lease-ms", flags->lease_ms, "Node lease of the agents, in [300, 600000]")->capture_default_str();
  command->add_option("worker", flags->worker, "Worker command after -- (default: hdp train --smoke)");
  command->callback([flags] {
    const int code = run_job(*flags);
    if (code != kExitOk) throw CLI::RuntimeError(code);
  });
}

}  // namespace hdp::cli
