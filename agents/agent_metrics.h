// File: agents/agent_metrics.h
//
// The agent's Prometheus endpoint: GET /metrics on --metrics-port serves, in the text exposition
// format, the agent's own metrics and its workers':
//   agent: hdp_agent_lease_age_seconds (since the heartbeat last renewed the lease),
//   hdp_agent_lease_duration_seconds, hdp_agent_heartbeat_seconds (histogram: one heartbeat, its
//   Redis round trips included), hdp_agent_generation, hdp_agent_member, hdp_agent_leader,
//   hdp_job_world_size, hdp_job_nodes (of the generation last read), hdp_agent_workers_running,
//   hdp_agent_worker_restarts_total, hdp_agent_worker_metrics_errors_total,
//   hdp_agent_store_primary_info{primary} (1 for the Redis node "host:port" the agent's connection
//   went to last: through Sentinel, the primary it resolved), hdp_agent_store_failovers_total (times
//   that primary changed, RedisStore::failovers()), and Redis' round trips
//   and errors (hdp_redis_request_seconds, hdp_redis_errors_total: metrics/timed_store.h), and
//   hdp_http_connections_closed_total{reason}: connections this endpoint closed or refused for a
//   limit of metrics/http_server.h (head_deadline, body_deadline, write_deadline, idle, over_cap,
//   per_address, too_large), so that a flood of slow clients shows on the dashboards it targets;
//   workers: each worker's registry (trainer/worker_metrics.h), read from the file the agent named
//   in its HDP_AGENT_METRICS_FILE, with the label `slot`.
// Every sample carries `hdp_job` and `node` (not `job`, which Prometheus sets to its scrape job).
// Nothing secret is exported: no URL, no password, no path (the primary's host and port only).
//
// The server runs on its own thread, so a scrape is answered while the agent's thread waits on
// Redis; the agent's thread updates the registry after each heartbeat (update()).
#pragma once

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "elastic/membership_agent.h"
#include "metrics/http_server.h"
#include "metrics/registry.h"

namespace hdp::agents {

struct AgentMetricsOptions {
  std::string job, node;
  int slots = 1;
  std::string address = "0.0.0.0";
  int port = 0;  // 0: a free port
  std::chrono::milliseconds lease{5000};
  // Where the workers' metrics files go: the node's directory (agents/node_directory.h), which
  // outlives this object.
  std::filesystem::path directory;
};

class AgentMetrics {
 public:
  // Starts serving. Throws InvalidArgument when the port is in use or the address is not an IP
  // address.
  explicit AgentMetrics(AgentMetricsOptions options);
  ~AgentMetrics();  // stops serving
  AgentMetrics(const AgentMetrics&) = delete;
  AgentMetrics& operator=(const AgentMetrics&) = delete;

  int port() const { return server_->port(); }
  std::filesystem::path worker_file(int slot) const;  // what the worker of `slot` gets as HDP_AGENT_METRICS_FILE
  metrics::Registry& registry() { return registry_; }  // for TimedStore

  struct Sample {
    double heartbeat_seconds = 0;
    std::optional<std::chrono::steady_clock::time_point> renewed;
    elastic::MembershipAgent::View view;
    std::int64_t last_generation = 0;
    bool leader = false;
    int workers_running = 0;
    int restarts_total = 0;
    std::string store_primary;  // RedisStore::primary(); "": none (no series)
    int store_failovers = 0;    // RedisStore::failovers()
  };
  void update(const Sample& sample);  // the agent's thread, after a heartbeat
  void worker_gone(int slot);         // its worker exited: its metrics go with it

  std::string scrape() const;  // the /metrics text

 private:
  metrics::Labels labels(metrics::Labels more = {}) const;

  AgentMetricsOptions options_;
  metrics::Registry registry_;
  std::atomic<std::int64_t> renewed_ns_{-1};  // steady clock, ns; -1: never
  mutable std::atomic<std::int64_t> worker_errors_{0};
  int restarts_seen_ = 0;
  int failovers_seen_ = 0;
  std::string primary_shown_;  // the `primary` label of hdp_agent_store_primary_info ("": none)
  // The server, for its counters: set once it is constructed, while it may already be serving (a
  // scrape that comes first reports none closed).
  std::atomic<const metrics::HttpServer*> http_{nullptr};
  std::unique_ptr<metrics::HttpServer> server_;  // last: stopped first
};

}  // namespace hdp::agents
