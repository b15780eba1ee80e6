// `hdp agent`: the per-node daemon (agents/agent.h). Exit codes (cli/exit_codes.h): 0 job
// completed, 1 agent error (a node id held by another live agent, every slot out of restarts),
// 2 usage error, 3 job failed permanently (do not requeue), 4 drained on a signal, 5 this node
// refused by the running job.
#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <memory>

#include "agents/agent.h"
#include "agents/worker_supervisor.h"
#include "agents/worker_count.h"
#include "cli/build_info.h"
#include "cli/commands.h"
#include "cli/self_executable.h"
#include "cli/exit_codes.h"
#include "cli/job_options.h"
#include "common/error.h"
#include "common/log.h"
#include "elastic/agent_presence.h"
#include "elastic/job_keys.h"
#include "elastic/lease_timing.h"
#include "elastic/membership.h"
#include "elastic/prefix_store.h"
#include "ops/tensor.h"

namespace hdp::cli {
namespace {

struct AgentFlags {
  JobOptions job;
  std::string node_id;
  std::string advertise;
  std::string nproc = "auto";
  std::string nnodes = "1:4096";
  int lease_ms = static_cast<int>(elastic::kDefaultLease.count());
  int settle_ms = 1000;
  int max_restarts = 3;
  bool standby_worker = false;
  int drain_timeout_s = 30;
  int store_outage_limit_s = 300;
  int metrics_port = -1;
  std::string metrics_address = "0.0.0.0";
  std::vector<std::string> worker;
};

std::string default_node_id() {
  if (const char* slurm = std::getenv("SLURMD_NODENAME"); slurm && *slurm) return slurm;
  char host[HOST_NAME_MAX + 1] = {};
  gethostname(host, sizeof host);
  return host;
}

// The local address that routes to the Redis host: what peers on other nodes can reach. (A UDP
// connect sends nothing; it only picks the route.)
std::string default_advertise_address(const elastic::RedisEndpoint& endpoint) {
  if (endpoint.is_unix()) return "127.0.0.1";
  // Through Sentinel: the first sentinel stands for the store's network.
  const auto [host, port] = endpoint.is_sentinel() ? endpoint.sentinels.front() : std::pair(endpoint.host, endpoint.port);
  addrinfo hints{}, *found = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || !found) {
    return "127.0.0.1";
  }
  std::string address = "127.0.0.1";
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in local{};
  socklen_t length = sizeof local;
  if (fd >= 0 && connect(fd, found->ai_addr, found->ai_addrlen) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0) {
    char text[INET_ADDRSTRLEN] = {};
    if (inet_ntop(AF_INET, &local.sin_addr, text, sizeof text)) address = text;
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(found);
  return address;
}

}  // namespace

void add_agent_command(CLI::App& app) {
  auto flags = std::make_shared<AgentFlags>();
  CLI::App* command = app.add_subcommand("agent", "Run the node agent: lease, workers, leader election (one per node)");
  flags->job.add_to(*command);
  command->add_option("--node-id", flags->node_id, "This node's id (default: $SLURMD_NODENAME, else the hostname)")
      ->envname("HDP_NODE_ID");
  command->add_option("--advertise-addr", flags->advertise, "Address workers publish to peers (default: the route to Redis)")
      ->envname("HDP_ADVERTISE_ADDR");
  command->add_option("--nproc-per-node", flags->nproc,
                      "Workers on this node: N, gpu (one per visible CUDA device, refused without one) or auto "
                      "(one per CUDA device, else 1)")
      ->envname("HDP_NPROC_PER_NODE")
      ->capture_default_str();
  command->add_option("--nnodes", flags->nnodes, "Nodes the job runs on: N or MIN:MAX")
      ->envname("HDP_NNODES")
      ->capture_default_str();
  command->add_option("--lease-ms", flags->lease_ms,
                      "Node lease in [" + std::to_string(elastic::kMinLease.count()) + ", " +
                          std::to_string(elastic::kMaxLease.count()) +
                          "]; a silent node is dropped after this. Heartbeat, leader lease "
                      "and the default --redis-timeout (lease/6) derive from it")
      ->envname("HDP_LEASE_MS")
      ->capture_default_str();
  command->add_option("--settle-ms", flags->settle_ms, "Joins within this window become one generation")
      ->check(CLI::Range(0, 600000))
      ->capture_default_str();
  const auto healthy_run = std::chrono::duration_cast<std::chrono::minutes>(agents::WorkerSupervisor::Options{}.healthy_run);
  command->add_option("--max-restarts", flags->max_restarts,
                      "Restarts of a crashed worker in a row before its slot is given up (one that ran " +
                          std::to_string(healthy_run.count()) + " min starts a new row)")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();
  command->add_flag("--standby-worker,!--no-standby-worker", flags->standby_worker,
                    "Keep one more `hdp train` process per node ahead of need, its data indexed, and hand a crashed "
                    "worker's slot to it instead of starting a process from nothing (the worker command must "
                    "be `hdp train ...`)")
      ->envname("HDP_STANDBY_WORKER");
  command->add_option("--drain-timeout", flags->drain_timeout_s, "Seconds workers get to checkpoint and exit on a drain")
      ->check(CLI::Range(0, 86400))
      ->capture_default_str();
  command->add_option("--store-outage-limit", flags->store_outage_limit_s,
                      "Seconds the agent rides out a store that answers nothing (the primary down and no sentinel "
                      "quorum) before it stops the workers at a step boundary and exits 1 (0: never)")
      ->envname("HDP_STORE_OUTAGE_LIMIT")
      ->check(CLI::Range(0, 31536000))
      ->capture_default_str();
  command->add_option("--metrics-port", flags->metrics_port,
                      "Serve Prometheus metrics of the agent and its workers on http://ADDR:PORT/metrics "
                      "(-1: off; 0: a free port, logged)")
      ->envname("HDP_METRICS_PORT")
      ->check(CLI::Range(-1, 65535))
      ->capture_default_str();
  command->add_option("--metrics-address", flags->metrics_address, "Address the metrics endpoint listens on")
      ->envname("HDP_METRICS_ADDRESS")
      ->capture_default_str();
  command->add_option("worker", flags->worker, "Worker command after -- (default: hdp train, configured by HDP_* variables)");
  command->callback([flags] {
    agents::AgentOptions options;
    options.job = flags->job.job_id();
    options.nnodes = elastic::parse_nnodes(flags->nnodes);
    const elastic::RedisEndpoint endpoint = elastic::parse_redis_url(flags->job.redis.url);
    options.node_id = flags->node_id.empty() ? default_node_id() : flags->node_id;
    options.advertise_address = flags->advertise.empty() ? default_advertise_address(endpoint) : flags->advertise;
    options.redis_url = flags->job.redis.url;
    options.redis_password_file = flags->job.redis.password_file;
    options.sentinel_password_file = flags->job.redis.sentinel_password_file;
    options.slots = agents::resolve_worker_count(flags->nproc, ops::cuda_device_count());
    // Lease, heartbeat, leader lease, tick and the Redis timeouts: derived and checked here, once.
    options.timing = elastic::derive_lease_timing(std::chrono::milliseconds(flags->lease_ms),
                                                  flags->job.redis.timeout_given());
    options.settle = std::chrono::milliseconds(flags->settle_ms);
    options.max_restarts = flags->max_restarts;
    options.standby_worker = flags->standby_worker;
    options.drain_timeout = std::chrono::seconds(flags->drain_timeout_s);
    options.store_outage_limit = std::chrono::seconds(flags->store_outage_limit_s);
    if (flags->metrics_port >= 0) options.metrics_port = flags->metrics_port;
    options.metrics_address = flags->metrics_address;
    options.worker_command = flags->worker.empty() ? std::vector<std::string>{self_executable(), "train"}
                                                   : flags->worker;
    // A standby reads its slot from standard input (elastic/worker_env.h, HDP_STANDBY); a command
    // that does not would run as a second local rank 0.
    if (options.standby_worker && (options.worker_command.size() < 2 || options.worker_command[1] != "train")) {
      throw InvalidArgument("--standby-worker needs `hdp train` as the worker command (a standby worker reads its "
                            "slot on standard input), not '" + options.worker_command.front() + "'");
    }
    // The first connection: no lease exists yet, so it may wait longer than a store call may once
    // the agent runs (agents started beside Redis, under Slurm or systemd, need not race it).
    // The agent keeps the RedisStore itself too: it records and exports the primary it reached.
    // The connection is named after the agent (job, node, host, pid), so that the leader can tell
    // that the process is gone once its connection is (elastic/agent_presence.h).
    elastic::RedisStoreOptions store_options = options.timing.store;
    store_options.client_name = elastic::AgentPresence::client_name(
        options.job, elastic::NodeLease{.node = options.node_id, .host = options.advertise_address, .pid = getpid()});
    std::shared_ptr<elastic::RedisStore> redis;
    for (const auto until = std::chrono::steady_clock::now() + options.timing.registration_wait;;) {
      try {
        redis = flags->job.redis.connect(store_options);
        break;
      } catch (const StoreUnavailable& e) {
        if (std::chrono::steady_clock::now() >= until) throw;
        log()->warn("agent {}: Redis not reachable yet ({}); retrying", options.node_id, e.what());
      }
    }
    auto store = std::make_shared<elastic::PrefixStore>(redis, elastic::keys::job_namespace(options.job));
    switch (agents::run_agent(options, store, redis)) {
      case agents::AgentOutcome::kCompleted: throw CLI::RuntimeError(kExitOk);
      case agents::AgentOutcome::kJobFailed: throw CLI::RuntimeError(kExitJobFailed);
      case agents::AgentOutcome::kDrained: throw CLI::RuntimeError(kExitDrained);
      case agents::AgentOutcome::kRefused: throw CLI::RuntimeError(kExitRefused);
    }
  });
}

}  // namespace hdp::cli
