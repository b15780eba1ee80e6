#include "agents/agent_metrics.h"

#include <fstream>
#include <sstream>

#include "common/error.h"
#include "common/log.h"

namespace hdp::agents {

using metrics::Type;
using Clock = std::chrono::steady_clock;

AgentMetrics::AgentMetrics(AgentMetricsOptions options) : options_(std::move(options)) {
  HDP_CHECK(!options_.directory.empty(), "the agent's metrics need the node's directory for the workers' files");
  auto& r = registry_;
  r.describe("hdp_agent_lease_age_seconds", Type::kGauge, "Time since the agent's heartbeat last renewed its lease");
  r.describe("hdp_agent_lease_duration_seconds", Type::kGauge, "The lease: a node silent this long leaves the job");
  r.describe("hdp_agent_heartbeat_seconds", Type::kHistogram, "Wall time of one heartbeat (its Redis round trips)");
  r.describe("hdp_agent_generation", Type::kGauge, "Highest generation the agent has seen");
  r.describe("hdp_agent_member", Type::kGauge, "1 when the node is a member of the generation last read");
  r.describe("hdp_agent_leader", Type::kGauge, "1 while the agent holds the leader lease");
  r.describe("hdp_job_world_size", Type::kGauge, "Ranks of the generation the agent last read");
  r.describe("hdp_job_nodes", Type::kGauge, "Nodes of the generation the agent last read");
  r.describe("hdp_agent_workers_running", Type::kGauge, "The node's worker processes running");
  r.describe("hdp_agent_worker_restarts_total", Type::kCounter, "Workers the agent restarted after a failure");
  r.describe("hdp_agent_worker_metrics_errors_total", Type::kCounter,
             "Scrapes that found a worker's metrics file unreadable (the worker's metrics were left out)");
  r.describe("hdp_agent_store_primary_info", Type::kGauge,
             "1 for the Redis node (host:port) the agent's store connection went to last: the primary, through Sentinel");
  r.describe("hdp_agent_store_failovers_total", Type::kCounter,
             "Times the agent's store connection went to another primary than before (a failover seen through Sentinel)");
  r.describe("hdp_http_connections_closed_total", Type::kCounter,
             "Connections the metrics endpoint closed or refused for a limit (a deadline missed, idle, the cap or the "
             "client's share of it reached, a request too large)");
  r.set_gauge("hdp_agent_lease_duration_seconds", labels(), static_cast<double>(options_.lease.count()) / 1000.0);
  r.add_counter("hdp_agent_worker_restarts_total", labels(), 0);
  r.add_counter("hdp_agent_worker_metrics_errors_total", labels(), 0);
  r.add_counter("hdp_agent_store_failovers_total", labels(), 0);

  server_ = std::make_unique<metrics::HttpServer>(options_.address, options_.port, [this](const metrics::HttpRequest& request) {
    if (request.path == "/metrics") {
      return metrics::HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8", scrape()};
    }
    if (request.path == "/") return metrics::HttpResponse{200, "text/plain; charset=utf-8", "hdp agent: see /metrics\n"};
    return metrics::HttpResponse{404, "text/plain; charset=utf-8", "not found\n"};
  });
  http_ = server_.get();
  log()->info("node {}: serving metrics on http://{}:{}/metrics", options_.node, options_.address, port());
}

AgentMetrics::~AgentMetrics() { server_.reset(); }

std::filesystem::path AgentMetrics::worker_file(int slot) const {
  return options_.directory / ("worker-" + std::to_string(slot) + ".json");
}

metrics::Labels AgentMetrics::labels(metrics::Labels more) const {
  more["hdp_job"] = options_.job;
  more["node"] = options_.node;
  return more;
}

void AgentMetrics::update(const Sample& s) {
  auto& r = registry_;
  const auto l = labels();
  r.observe("hdp_agent_heartbeat_seconds", l, s.heartbeat_seconds);
  if (s.renewed) {
    renewed_ns_ = std::chrono::duration_cast<std::chrono::nanoseconds>(s.renewed->time_since_epoch()).count();
  }
  r.set_gauge("hdp_agent_generation", l, static_cast<double>(s.last_generation));
  r.set_gauge("hdp_agent_member", l, s.view.member ? 1 : 0);
  r.set_gauge("hdp_agent_leader", l, s.leader ? 1 : 0);
  r.set_gauge("hdp_job_world_size", l, s.view.world_size);
  r.set_gauge("hdp_job_nodes", l, s.view.nodes);
  r.set_gauge("hdp_agent_workers_running", l, s.workers_running);
  if (s.restarts_total > restarts_seen_) {
    r.add_counter("hdp_agent_worker_restarts_total", l, s.restarts_total - restarts_seen_);
    restarts_seen_ = s.restarts_total;
  }
  if (s.store_failovers > failovers_seen_) {
    r.add_counter("hdp_agent_store_failovers_total", l, s.store_failovers - failovers_seen_);
    failovers_seen_ = s.store_failovers;
  }
  if (s.store_primary != primary_shown_) {
    // One series: the old primary's goes (its labels are ours plus `primary`, which no other family has).
    if (!primary_shown_.empty()) r.remove_samples(labels({{"primary", primary_shown_}}));
    if (!s.store_primary.empty()) r.set_gauge("hdp_agent_store_primary_info", labels({{"primary", s.store_primary}}), 1);
    primary_shown_ = s.store_primary;
  }
}

void AgentMetrics::worker_gone(int slot) {
  std::error_code ignored;
  std::filesystem::remove(worker_file(slot), ignored);
}

std::string AgentMetrics::scrape() const {
  metrics::Registry out(registry_);
  const std::int64_t renewed = renewed_ns_;
  if (renewed >= 0) {
    const auto now = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
    out.set_gauge("hdp_agent_lease_age_seconds", labels(), static_cast<double>(now - renewed) / 1e9);
  }
  for (int slot = 0; slot < options_.slots; ++slot) {
    std::ifstream in(worker_file(slot), std::ios::binary);
    if (!in) continue;  // no worker, or it has not completed a step yet
    std::ostringstream text;
    text << in.rdbuf();
    try {
      out.merge(metrics::Registry::from_json(text.str()), labels({{"slot", std::to_string(slot)}}));
    } catch (const Error& e) {
      ++worker_errors_;
      log()->warn("node {}: the metrics of worker {} are unreadable: {}", options_.node, slot, e.what());
    }
  }
  out.add_counter("hdp_agent_worker_metrics_errors_total", labels(), static_cast<double>(worker_errors_.load()));
  metrics::HttpServerStats http;
  if (const metrics::HttpServer* server = http_.load()) http = server->stats();
  for (const auto& [reason, count] : {std::pair{"head_deadline", http.closed_head_deadline},
                                      std::pair{"body_deadline", http.closed_body_deadline},
                                      std::pair{"write_deadline", http.closed_write_deadline},
                                      std::pair{"idle", http.closed_idle},
                                      std::pair{"over_cap", http.refused_over_cap},
                                      std::pair{"per_address", http.refused_per_address},
                                      std::pair{"too_large", http.too_large_431 + http.too_large_413}}) {
    out.add_counter("hdp_http_connections_closed_total", labels({{"reason", reason}}), static_cast<double>(count));
  }
  return out.text();
}

}  // namespace hdp::agents
