// `hdp run`: the one-machine launcher. Starts a private redis-server on a free loopback port
// (unless --redis is given), N agents with distinct node ids, prints the job id and how to query
// it, reports progress, and on exit stops everything it started. SIGINT/SIGTERM drain the agents;
// a second signal kills them. Exits 0 when the job completed, even if agents were lost on the way.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
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
#include "elastic/redis_url.h"

namespace hdp::cli {
namespace {

std::atomic<int> signals_received{0};
void count_signal(int) { ++signals_received; }

// --kill-node NODE@STEP[+SECONDS]: SIGKILL the agent of NODE (its workers die with it) once the
// job reported STEP, and start it again SECONDS later (never, without +SECONDS).
struct NodeKill {
  std::string node;
  std::int64_t step = 0;
  std::optional<int> restart_after_s;
  bool killed = false, restarted = false;
  std::chrono::steady_clock::time_point killed_at{};
};

NodeKill parse_node_kill(const std::string& spec) {
  const auto at = spec.find('@');
  NodeKill kill;
  try {
    if (at == std::string::npos || at == 0) throw std::invalid_argument("no @");
    kill.node = spec.substr(0, at);
    const std::string rest = spec.substr(at + 1);
    const auto plus = rest.find('+');
    std::size_t used = 0;
    kill.step = std::stoll(rest.substr(0, plus), &used);
    if (used != rest.substr(0, plus).size() || kill.step < 1) throw std::invalid_argument("step");
    if (plus != std::string::npos) {
      kill.restart_after_s = std::stoi(rest.substr(plus + 1), &used);
      if (used != rest.size() - plus - 1 || *kill.restart_after_s < 0) throw std::invalid_argument("seconds");
    }
  } catch (const std::exception&) {
    throw InvalidArgument("--kill-node '" + spec + "' is not NODE@STEP or NODE@STEP+SECONDS (e.g. node2@40+10)");
  }
  return kill;
}

struct RunFlags {
  int nodes = 2;
  int nproc = 1;
  std::string redis;
  std::string redis_password_file;
  std::string job;
  std::string nnodes;
  int lease_ms = static_cast<int>(elastic::kDefaultLease.count());
  std::string kill_node;
  std::string run_dir = "hdp-runs";
  int metrics_port = -1;
  int dashboard_port = -1;
  std::vector<std::string> worker;
};

// A directory only this user can enter (mkdtemp: 0700) under $TMPDIR, removed with what it holds.
struct PrivateDir {
  std::filesystem::path path;
  PrivateDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/hdp-run-XXXXXX";
    if (!mkdtemp(pattern.data())) throw Error("cannot create a private directory under " + pattern);
    path = pattern;
  }
  ~PrivateDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  PrivateDir(const PrivateDir&) = delete;
  PrivateDir& operator=(const PrivateDir&) = delete;
};

// The job `hdp run` trains when no worker command is given: the demo model on this machine's C/C++
// headers, about a minute and a half on two cores, checkpoints and TensorBoard event files under
// <run dir>/<job>/.
std::vector<std::string> default_worker(const std::string& self, const std::filesystem::path& job_dir) {
  return {self,           "train",          "--model",      "demo", "--steps",     "100",
          "--context",    "512",            "--capacity",   "512",  "--batch-tokens", "4096",
          "--lr",         "1e-3",           "--warmup-steps", "10", "--checkpoint-dir", (job_dir / "checkpoints").string(),
          "--checkpoint-every", "10",       "--log-every",  "5",    "--tensorboard-dir", (job_dir / "tb").string()};
}

// One line whenever the job's generation or status changes (the workers print the steps).
class ProgressLine {
 public:
  explicit ProgressLine(std::shared_ptr<elastic::Store> store) : state_(std::move(store)) {}
  // The job's reported step (0 before the first report); -1 when the store cannot be read.
  std::int64_t update() {
    try {
      auto s = state_.snapshot(0);
      auto get = [&](const char* k) { return s.state.count(k) ? s.state.at(k) : std::string("-"); };
      std::string line = "generation " + std::to_string(s.generation) + ", world size " +
                         std::to_string(s.members ? s.members->world_size() : 0) + ", status " + get("status");
      if (line != last_) std::cout << "hdp run: " << line << ", step " << get("step") << std::endl;
      last_ = line;
      const std::int64_t step = s.state.count("step") ? std::stoll(s.state.at("step")) : 0;
      if (step > 0 && !first_step_) first_step_ = std::chrono::steady_clock::now();
      if (s.state.count("loss") && !first_loss_) first_loss_ = s.state.at("loss");
      return step;
    } catch (const Error& e) {
      log()->debug("hdp run: progress unavailable: {}", e.what());
      return -1;
    }
  }
  std::optional<std::chrono::steady_clock::time_point> first_step() const { return first_step_; }
  const std::optional<std::string>& first_loss() const { return first_loss_; }

 private:
  elastic::JobState state_;
  std::string last_;
  std::optional<std::chrono::steady_clock::time_point> first_step_;
  std::optional<std::string> first_loss_;
};

// The end of a run: what the job did, from its state and events.
void print_summary(elastic::Store& job_store, const ProgressLine& progress) {
  try {
    elastic::JobState state(std::shared_ptr<elastic::Store>(&job_store, [](elastic::Store*) {}));
    const auto s = state.snapshot(elastic::kEventsKept);
    auto get = [&](const char* k) { return s.state.count(k) ? s.state.at(k) : std::string("-"); };
    std::cout << "hdp run: summary: " << get("status") << " at step " << get("step") << ", " << get("tokens")
              << " tokens";
    if (progress.first_step() && s.state.count("tokens")) {
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - *progress.first_step()).count();
      std::cout << " (" << static_cast<long long>(std::stod(s.state.at("tokens")) / std::max(seconds, 1e-3))
                << " tokens/s over " << static_cast<long long>(seconds) << " s of training)";
    }
    std::cout << "; loss " << progress.first_loss().value_or("-") << " -> " << get("loss") << std::endl;
    std::string sizes, last_size;
    int resizes = -1, generations = 0;
    for (const auto& e : s.events) {
      auto field = [&](const char* k) {
        for (const auto& [name, value] : e.fields) {
          if (name == k) return value;
        }
        return std::string("-");
      };
      const std::string type = field("type");
      if (type == "resize" && field("status") == "running") {
        ++generations;
        if (field("world_size") != last_size) {
          sizes += (sizes.empty() ? "" : " -> ") + field("world_size");
          last_size = field("world_size");
          ++resizes;
        }
      } else if (type == "recovered") {
        std::cout << "hdp run:   generation " << field("generation") << ": recovered in " << field("seconds")
                  << " s, " << field("lost_steps") << " step(s) lost, world size " << field("world_size") << std::endl;
      } else if (type == "continue") {
        std::cout << "hdp run:   generation " << field("generation") << ": continued from memory at step "
                  << field("step") << std::endl;
      }
    }
    std::cout << "hdp run:   world size " << (sizes.empty() ? "-" : sizes) << " (" << std::max(resizes, 0)
              << " resize(s) in " << generations << " generation(s)); last checkpoint: step " << get("last_ckpt_step") << " at " << get("last_ckpt_path")
              << std::endl;
  } catch (const Error& e) {
    std::cout << "hdp run: no summary: " << e.what() << std::endl;
  }
}

int run_job(const RunFlags& flags) {
  // The agents derive their timing from the lease (elastic/lease_timing.h); refuse a bad one here,
  // before starting anything.
  elastic::derive_lease_timing(std::chrono::milliseconds(flags.lease_ms), std::nullopt);
  std::optional<NodeKill> node_kill;
  if (!flags.kill_node.empty()) node_kill = parse_node_kill(flags.kill_node);
  const std::string job = flags.job.empty() ? "run-" + elastic::new_incarnation().substr(0, 8) : flags.job;
  elastic::validate_job_id(job);
  const std::string nnodes = flags.nnodes.empty() ? std::to_string(flags.nodes) + ":" + std::to_string(flags.nodes)
                                                  : flags.nnodes;
  elastic::parse_nnodes(nnodes);
  // No process this starts carries the Redis password in its command line: the agents and the
  // dashboard get the URL without it and a password file (mode 0600). The private Redis gets a
  // random password, so that other users of this machine cannot reach the job through it.
  std::unique_ptr<agents::EmbeddedRedis> redis;
  std::optional<PrivateDir> secrets;
  std::string url = flags.redis, password_file = flags.redis_password_file;
  if (url.empty()) {
    agents::EmbeddedRedisOptions options;
    options.password = elastic::new_incarnation() + elastic::new_incarnation();
    redis = std::make_unique<agents::EmbeddedRedis>(std::move(options));
    url = redis->url();
    password_file = redis->password_file();
  } else if (const elastic::RedisEndpoint given = elastic::parse_redis_url(url); given.password) {
    secrets.emplace();
    password_file = agents::write_private_file(secrets->path / "redis.password", *given.password + "\n").string();
    url = elastic::split_password(url).first;
  }
  std::vector<std::string> redis_args = {"--redis", url};
  if (!password_file.empty()) redis_args.insert(redis_args.end(), {"--redis-password-file", password_file});
  std::string watch = "hdp status --job " + job;
  for (const std::string& arg : redis_args) watch += " " + arg;
  std::cout << "hdp run: job " << job << " on " << url << " with " << flags.nodes << " agent(s) x " << flags.nproc
            << " worker(s)\nhdp run: watch it with: " << watch << " --watch" << std::endl;

  // The workers of every agent share this machine's cores: one OpenMP team each, sized so that
  // they do not oversubscribe it (hdp train's --threads; a value already set wins).
  const long cores = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
  setenv("HDP_THREADS", std::to_string(std::max(1L, cores / (flags.nodes * flags.nproc))).c_str(), 0);

  const std::string self = self_executable();
  std::vector<std::string> worker = flags.worker;
  if (worker.empty()) {
    const auto job_dir = std::filesystem::absolute(flags.run_dir) / job;
    worker = default_worker(self, job_dir);
    std::cout << "hdp run: training the demo model; checkpoints in " << (job_dir / "checkpoints").string()
              << ", TensorBoard event files in " << (job_dir / "tb").string() << std::endl;
  }
  std::map<std::string, std::vector<std::string>> argv_of;  // by node id
  std::map<pid_t, std::string> agents_running;              // pid -> node id
  for (int i = 0; i < flags.nodes; ++i) {
    const std::string node = "node" + std::to_string(i);
    std::vector<std::string> argv = {self,      "agent", "--job",           job,
                                     "--node-id", node,  "--nproc-per-node", std::to_string(flags.nproc),
                                     "--nnodes", nnodes, "--lease-ms",      std::to_string(flags.lease_ms)};
    argv.insert(argv.begin() + 4, redis_args.begin(), redis_args.end());
    if (flags.metrics_port >= 0) {
      const int port = flags.metrics_port == 0 ? 0 : flags.metrics_port + i;
      argv.insert(argv.end(), {"--metrics-port", std::to_string(port), "--metrics-address", "127.0.0.1"});
      if (port > 0) std::cout << "hdp run: " << node << " serves metrics on http://127.0.0.1:" << port << "/metrics" << std::endl;
    }
    argv.push_back("--");
    argv.insert(argv.end(), worker.begin(), worker.end());
    argv_of[node] = argv;
    agents_running[agents::spawn({argv, {}})] = node;
  }
  if (node_kill && !argv_of.count(node_kill->node)) {
    throw InvalidArgument("--kill-node: no agent named '" + node_kill->node + "' (node0 .. node" +
                          std::to_string(flags.nodes - 1) + ")");
  }

  pid_t dashboard = -1;
  if (flags.dashboard_port >= 0) {
    std::vector<std::string> argv = {self, "dashboard", "--job", job, "--port", std::to_string(flags.dashboard_port)};
    argv.insert(argv.end(), redis_args.begin(), redis_args.end());
    dashboard = agents::spawn({argv, {}});
    std::cout << "hdp run: dashboard (pid " << dashboard << ") on http://127.0.0.1:" << flags.dashboard_port << "/" << std::endl;
  }

  struct sigaction action {};
  action.sa_handler = count_signal;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);

  elastic::RedisEndpoint endpoint = elastic::parse_redis_url(url);
  if (!password_file.empty()) endpoint.password = elastic::read_password_file(password_file);
  auto job_store = std::make_shared<elastic::PrefixStore>(std::make_shared<elastic::RedisStore>(endpoint),
                                                          elastic::keys::job_namespace(job));
  ProgressLine progress(job_store);
  std::set<pid_t> killed_on_purpose;
  // The first agent's non-zero code decides when the job did not complete, but a node the running
  // job refused (kExitRefused) decides nothing while another agent has something to say.
  int exit_code = kExitOk, forwarded = 0, agents_failed = 0;
  bool refused = false;
  while (!agents_running.empty()) {
    if (signals_received > forwarded) {
      forwarded = signals_received;
      const int signo = forwarded == 1 ? SIGTERM : SIGKILL;
      std::cout << "hdp run: " << (forwarded == 1 ? "draining the agents" : "killing the agents") << std::endl;
      for (const auto& [pid, node] : agents_running) kill(pid, signo);
    }
    int status = 0;
    pid_t done = waitpid(-1, &status, WNOHANG);
    if (done > 0 && done == dashboard) {
      std::cout << "hdp run: the dashboard ended (" << agents::describe_status(status) << ")" << std::endl;
      dashboard = -1;
      continue;
    }
    if (done > 0) {
      const std::string node = agents_running.count(done) ? agents_running.at(done) : "?";
      agents_running.erase(done);
      const int code = WIFEXITED(status) ? WEXITSTATUS(status) : kExitFailure;
      std::cout << "hdp run: agent " << node << " (pid " << done << ") ended (" << agents::describe_status(status)
                << ")" << std::endl;
      if (killed_on_purpose.count(done)) continue;
      if (code != kExitOk) {
        ++agents_failed;
        if (code == kExitRefused) {
          refused = true;
        } else if (exit_code == kExitOk) {
          exit_code = code;
        }
      }
      continue;
    }
    const std::int64_t step = progress.update();
    if (node_kill && forwarded == 0) {
      NodeKill& k = *node_kill;
      if (!k.killed && step >= k.step) {
        for (const auto& [pid, node] : agents_running) {
          if (node != k.node) continue;
          std::cout << "hdp run: --kill-node: SIGKILL the agent of " << node << " (pid " << pid
                    << ") and with it its workers, at step " << step << std::endl;
          kill(pid, SIGKILL);
          killed_on_purpose.insert(pid);
        }
        k.killed = true;
        k.killed_at = std::chrono::steady_clock::now();
      } else if (k.killed && !k.restarted && k.restart_after_s &&
                 std::chrono::steady_clock::now() - k.killed_at >= std::chrono::seconds(*k.restart_after_s) &&
                 !elastic::job_completed(*job_store)) {
        const pid_t pid = agents::spawn({argv_of.at(k.node), {}});
        agents_running[pid] = k.node;
        k.restarted = true;
        std::cout << "hdp run: --kill-node: started " << k.node << " again (pid " << pid << ")" << std::endl;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  progress.update();
  print_summary(*job_store, progress);
  if (dashboard > 0) {
    kill(dashboard, SIGTERM);
    waitpid(dashboard, nullptr, 0);
  }
  // The job's outcome decides: losing an agent on the way is what elasticity is for.
  if (elastic::job_completed(*job_store)) {
    std::cout << "hdp run: job " << job << " completed";
    if (agents_failed > 0) std::cout << " (" << agents_failed << " agent(s) lost on the way)";
    std::cout << std::endl;
    return kExitOk;
  }
  if (exit_code == kExitOk) exit_code = refused ? kExitRefused : kExitFailure;  // or every agent exited 0, yet no outcome
  std::optional<std::string> status;
  try {
    auto fields = job_store->hash_get_all(elastic::keys::kState);
    if (fields.count("status")) status = fields.at("status");
  } catch (const Error&) {
  }
  if (status == "stopped" && flags.worker.empty()) {
    std::cout << "hdp run: job " << job << " stopped with a final checkpoint; `hdp run --job " << job
              << "` (with the same --run-dir) resumes it" << std::endl;
  } else {
    std::cout << "hdp run: job " << job << " did not complete; exit code " << exit_code << std::endl;
  }
  return exit_code;
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto flags = std::make_shared<RunFlags>();
  CLI::App* command = app.add_subcommand("run", "Run a whole job on this machine: a private Redis and N agents");
  command->add_option("--nodes", flags->nodes, "Agents to start")->check(CLI::Range(1, 256))->capture_default_str();
  command->add_option("--nproc-per-node", flags->nproc, "Workers per agent")->check(CLI::Range(1, 64))->capture_default_str();
  command->add_option("--redis", flags->redis, "Use this Redis instead of a private one")->envname("HDP_REDIS_URL");
  command->add_option("--redis-password-file", flags->redis_password_file, "File holding that Redis's password")
      ->envname("HDP_REDIS_PASSWORD_FILE");
  command->add_option("--job", flags->job, "Job id (default: run-<random>)");
  command->add_option("--nnodes", flags->nnodes, "MIN:MAX for the agents (default: --nodes:--nodes)");
  command->add_option("--lease-ms", flags->lease_ms, "Node lease of the agents, in [" + std::to_string(elastic::kMinLease.count()) + ", " +
                          std::to_string(elastic::kMaxLease.count()) + "]")->capture_default_str();
  command->add_option("--kill-node", flags->kill_node,
                      "Fault demo: SIGKILL NODE's agent and workers at STEP, start it again SECONDS later "
                      "(NODE@STEP[+SECONDS], e.g. node2@40+10)");
  command->add_option("--run-dir", flags->run_dir, "Where the default job keeps <job>/checkpoints and <job>/tb")->capture_default_str();
  command->add_option("--metrics-port", flags->metrics_port,
                      "Agent i serves Prometheus metrics on 127.0.0.1:PORT+i (-1: off; 0: free ports, logged)")
      ->check(CLI::Range(-1, 65535 - 1024));
  command->add_option("--dashboard-port", flags->dashboard_port,
                      "Serve the job's live dashboard (hdp dashboard) on 127.0.0.1:PORT while it runs (-1: off)")
      ->check(CLI::Range(-1, 65535));
  command->add_option("worker", flags->worker,
                      "Worker command after -- (default: hdp train of the demo model for 100 steps)");
  command->callback([flags] {
    const int code = run_job(*flags);
    if (code != kExitOk) throw CLI::RuntimeError(code);
  });
}

}  // namespace hdp::cli
