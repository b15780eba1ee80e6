// An agent's /metrics between real processes (a real `hdp agent`, its workers, a private
// redis-server with a password), scraped over HTTP as Prometheus would:
//   - the agent's own families are there and true (a member of generation >= 1, its lease age
//     under the lease, a worker running), in the text format, with `hdp_job` and `node` labels;
//   - the store's primary (its host and port, the one place the port appears) and no failover;
//   - no secret: neither the Redis password, nor the URL, nor the password file's path;
//   - a worker's garbage metrics file is left out and counted, and the rest is served;
//   - a worker SIGKILLed is restarted and counted (hdp_agent_worker_restarts_total);
//   - the agent SIGSTOPped answers no scrape (Prometheus marks the target down); after SIGCONT it
//     answers again within 2 s;
//   - a port in use: `hdp agent` exits 2 naming the port, before it registers;
//   - slow clients do not take its port (tests/support/http_flood.h): 200 half-open requests and
//     200 idle keep-alives from 127.0.0.2, while a scrape from 127.0.0.1 is answered within 1 s
//     throughout; each closed within its deadline and counted in
//     hdp_http_connections_closed_total{reason}.
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <regex>
#include <thread>

#include "tests/support/child_process.h"
#include "tests/support/http_flood.h"
#include "tests/support/http_get.h"
#include "tests/support/redis_server.h"
#include "tests/support/temp_dir.h"

namespace hdp::test {
namespace {

using namespace std::chrono_literals;

constexpr const char* kPassword = "s3cret-pa55";

// The value of the first sample of `name` whose labels contain `labels` (a substring), or -1.
double sample(const std::string& text, const std::string& name, const std::string& labels = "") {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with(name + "{") && !line.starts_with(name + " ")) continue;
    if (line.find(labels) == std::string::npos) continue;
    return std::stod(line.substr(line.rfind(' ') + 1));
  }
  return -1;
}

// The state letter of /proc/<pid>/stat ('R', 'S', 'T' for stopped, ...); '?' when unreadable.
char process_state(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const auto end = line.rfind(") ");
  return end != std::string::npos && end + 2 < line.size() ? line[end + 2] : '?';
}

class AgentMetrics : public ::testing::Test {
 protected:
  void SetUp() override {
    RedisServerOptions options;
    options.password = kPassword;
    redis_ = std::make_unique<RedisServer>(options);
    std::ofstream(password_file()) << kPassword << "\n";
  }
  std::string password_file() const { return (dir_.path() / "redis.password").string(); }
  std::string hdp() const { return std::string(std::getenv("HDP_BIN_DIR")) + "/hdp"; }
  // An agent with one worker running `worker` (a shell command), serving metrics on `port`.
  std::unique_ptr<ChildProcess> agent(int port, const std::string& worker) {
    return std::make_unique<ChildProcess>(
        std::vector<std::string>{hdp(), "agent", "--job", "m", "--redis", "redis://127.0.0.1:" + std::to_string(redis_->port()),
                                 "--redis-password-file", password_file(), "--node-id", "n1", "--nproc-per-node", "1",
                                 "--lease-ms", "2000", "--nnodes", "1", "--metrics-port", std::to_string(port),
                                 "--metrics-address", "127.0.0.1", "--", "/bin/sh", "-c", worker},
        (dir_.path() / "agent.log").string());
  }
  std::string log() const {
    std::ifstream in(dir_.path() / "agent.log");
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  // Scrapes until `predicate` holds on the text; returns the last text ("" when it never held).
  std::string scrape_until(int port, const std::function<bool(const std::string&)>& predicate, std::chrono::seconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      const HttpResult r = http_get(port, "/metrics", 2s);
      if (r.status == 200 && predicate(r.body)) return r.body;
      std::this_thread::sleep_for(100ms);
    }
    return "";
  }

  TempDir dir_;
  std::unique_ptr<RedisServer> redis_;
};

// A worker that keeps a well-formed metrics file (what trainer/worker_metrics.h writes) and runs.
const std::string kGoodWorker =
    "printf '%s' '{\"hdp_train_step\": {\"type\": \"gauge\", \"help\": \"Step\", \"buckets\": [], "
    "\"samples\": [{\"labels\": {}, \"value\": 7}]}}' > \"$HDP_AGENT_METRICS_FILE\"; exec sleep 1000";

TEST_F(AgentMetrics, TheAgentsAndItsWorkersMetricsWithoutSecrets) {
  const int port = free_loopback_port();
  auto a = agent(port, kGoodWorker);
  const std::string text = scrape_until(port, [](const std::string& t) {
    return sample(t, "hdp_agent_member") == 1 && sample(t, "hdp_train_step") == 7;
  }, 20s);
  ASSERT_FALSE(text.empty()) << log();
  EXPECT_NE(text.find("# TYPE hdp_agent_heartbeat_seconds histogram"), std::string::npos);
  EXPECT_NE(text.find("# TYPE hdp_agent_worker_restarts_total counter"), std::string::npos);
  EXPECT_GE(sample(text, "hdp_agent_generation", "hdp_job=\"m\",node=\"n1\""), 1);
  const double age = sample(text, "hdp_agent_lease_age_seconds");
  EXPECT_GE(age, 0);
  EXPECT_LT(age, 2.0) << "the lease (2 s) is renewed every 667 ms";
  EXPECT_EQ(sample(text, "hdp_agent_workers_running"), 1);
  EXPECT_EQ(sample(text, "hdp_job_world_size"), 1);
  EXPECT_EQ(sample(text, "hdp_train_step", "slot=\"0\""), 7);
  EXPECT_GT(sample(text, "hdp_redis_request_seconds_count", "op=\"refresh_ttl\""), 0);
  // The store's primary: a plain redis:// URL's server, never moved.
  const std::string primary = "primary=\"127.0.0.1:" + std::to_string(redis_->port()) + "\"";
  EXPECT_EQ(sample(text, "hdp_agent_store_primary_info", primary), 1) << text;
  EXPECT_EQ(sample(text, "hdp_agent_store_failovers_total"), 0) << text;
  // Secrets stay out: the password, the URL and the password file's path. The server's port
  // appears only as the primary's.
  EXPECT_EQ(text.find(kPassword), std::string::npos);
  EXPECT_EQ(text.find("redis://"), std::string::npos);
  std::string without_primary = text;
  for (std::size_t at; (at = without_primary.find(primary)) != std::string::npos;) without_primary.erase(at, primary.size());
  EXPECT_EQ(without_primary.find(std::to_string(redis_->port())), std::string::npos);
  EXPECT_EQ(text.find("redis.password"), std::string::npos);
  // Only /metrics (and a pointer to it at /).
  EXPECT_EQ(http_get(port, "/secrets").status, 404);
}

TEST_F(AgentMetrics, AGarbageWorkerFileIsLeftOutAndCounted) {
  const int port = free_loopback_port();
  auto a = agent(port, "printf '{\"hdp_x\": garbage' > \"$HDP_AGENT_METRICS_FILE\"; exec sleep 1000");
  const std::string text = scrape_until(port, [](const std::string& t) {
    return sample(t, "hdp_agent_worker_metrics_errors_total") >= 1 && sample(t, "hdp_agent_member") == 1;
  }, 20s);
  ASSERT_FALSE(text.empty()) << log();
  EXPECT_EQ(text.find("hdp_x"), std::string::npos);
}

TEST_F(AgentMetrics, AKilledWorkerIsCountedAPausedAgentAnswersNoScrapeUntilResumed) {
  const int port = free_loopback_port();
  auto a = agent(port, kGoodWorker);
  ASSERT_FALSE(scrape_until(port, [](const std::string& t) { return sample(t, "hdp_train_step") == 7; }, 20s).empty())
      << log();
  // SIGKILL the worker (the agent's child): restarted, counted.
  std::smatch match;
  const std::string before = log();
  ASSERT_TRUE(std::regex_search(before, match, std::regex("worker 0 started \\(pid (\\d+)\\)"))) << before;
  ASSERT_EQ(::kill(std::stoi(match[1]), SIGKILL), 0);
  EXPECT_FALSE(scrape_until(port, [](const std::string& t) {
                 return sample(t, "hdp_agent_worker_restarts_total") == 1 && sample(t, "hdp_agent_workers_running") == 1;
               }, 20s).empty())
      << log();

  a->signal(SIGSTOP);
  // SIGSTOP takes effect asynchronously: wait until the kernel shows the agent stopped ('T').
  const auto stop_deadline = std::chrono::steady_clock::now() + 5s;
  while (process_state(a->pid()) != 'T' && std::chrono::steady_clock::now() < stop_deadline) {
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_EQ(process_state(a->pid()), 'T');
  EXPECT_EQ(http_get(port, "/metrics", 2s).status, 0) << "a stopped agent answered";
  a->signal(SIGCONT);
  const auto resumed = std::chrono::steady_clock::now();
  EXPECT_FALSE(scrape_until(port, [](const std::string& t) { return sample(t, "hdp_agent_member") >= 0; }, 10s).empty());
  EXPECT_LT(std::chrono::steady_clock::now() - resumed, 2s + 2s) << "2 s bound, plus the stopped request's 2 s";
}

TEST_F(AgentMetrics, APortInUseExitsTwoBeforeRegistering) {
  RedisServer squatter_redis;  // anything listening on a port
  auto a = agent(squatter_redis.port(), "exec sleep 1000");
  const auto status = a->wait_for(30s);
  ASSERT_TRUE(status.has_value()) << "the agent did not exit";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 2) << *status << log();
  EXPECT_NE(log().find("port " + std::to_string(squatter_redis.port()) + " on 127.0.0.1 is in use"), std::string::npos)
      << log();
  EXPECT_EQ(log().find("registered"), std::string::npos) << "registered before checking its port";
}

TEST_F(AgentMetrics, SlowClientsDoNotTakeItsPortAndAreCounted) {
  const int port = free_loopback_port();
  auto a = agent(port, kGoodWorker);
  const std::string before =
      scrape_until(port, [](const std::string& t) { return sample(t, "hdp_agent_member") == 1; }, 20s);
  ASSERT_FALSE(before.empty()) << log();
  // hdp_http_connections_closed_total{reason=...} in a scrape (-1 when absent).
  const auto closed = [](const std::string& text, const std::string& reason) {
    return sample(text, "hdp_http_connections_closed_total", "reason=\"" + reason + "\"");
  };
  for (const char* reason : {"head_deadline", "idle", "per_address"}) ASSERT_GE(closed(before, reason), 0) << reason;

  // The flood, a normal scrape answered with the agent's metrics throughout.
  const FloodOptions options{.port = port, .path = "/metrics", .normal_ok = [](const std::string& answer) {
    return answer.starts_with("HTTP/1.1 200 OK\r\n") && answer.find("\nhdp_agent_member{") != std::string::npos;
  }};
  const FloodResult r = slow_client_flood(options);
  std::cout << "[ timing ] the agent's /metrics: " << r.summary() << std::endl;
  expect_port_withstood(r, options);

  // Each attacking connection counted once, under its reason: exact, since a half-open connection
  // the server admitted is closed at its head deadline (after the client's connect began), one it
  // refused on arrival as soon as accepted; a keep-alive one admitted is answered, then idle.
  const auto grew = [&](const std::string& text, const std::string& reason) {
    return closed(text, reason) - closed(before, reason);
  };
  const std::string after = scrape_until(port, [&](const std::string& t) {
    return grew(t, "head_deadline") + grew(t, "idle") + grew(t, "per_address") >= r.attackers();
  }, 5s);
  ASSERT_FALSE(after.empty()) << "the scrape never counted the " << r.attackers() << " connections\n" << r.details()
                              << "\n" << http_get(port, "/metrics", 2s).body;
  EXPECT_EQ(grew(after, "head_deadline"), static_cast<double>(r.expected_head_deadline()))
      << r.details() << "\n" << after;
  EXPECT_EQ(grew(after, "idle"), static_cast<double>(r.expected_idle())) << after;
  EXPECT_EQ(grew(after, "per_address"), static_cast<double>(r.expected_per_address())) << after;
  for (const char* reason : {"body_deadline", "write_deadline", "over_cap", "too_large"}) {
    EXPECT_EQ(grew(after, reason), 0) << reason << "\n" << after;
  }
  EXPECT_TRUE(a->running()) << log();
}

}  // namespace
}  // namespace hdp::test
