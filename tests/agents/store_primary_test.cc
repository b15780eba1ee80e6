// The store's primary and its failovers as `hdp status`, the job's keys and /metrics show them,
// between real processes: two `hdp agent`s (sleeping workers) on a redis+sentinel:// URL of a
// private Sentinel deployment (tests/support/sentinel_cluster.h: 1 primary, 2 replicas, 3
// sentinels, down-after 1000 ms).
//   - the agents record `store_primary` = the primary, and no failover (`store_failovers` absent);
//     `hdp status` and `hdp status --json` show it;
//   - after the primary is SIGKILLed and the sentinels promote a replica, `store_primary` names the
//     sentinels' primary and `store_failovers` counts the moves once, a few heartbeats later too:
//     both agents saw the move, one counted it (one agent logged it). The count is 1 when the
//     sentinels failed over once (as they do unloaded). On a loaded machine they may fail over
//     again (the fresh primary judged down too); the count is then between 1 and the sentinels'
//     switches (an agent that was away during the middle primary moves once), never above;
//   - `hdp status --json` and the text show it; each agent's /metrics has
//     hdp_agent_store_primary_info{primary="<new>"} 1 (and no series of the old primary) and
//     hdp_agent_store_failovers_total between 1 and the switches; both agents still run.
// The agents are started by hand (AgentCluster starts its own redis-server).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "elastic/job_keys.h"
#include "elastic/prefix_store.h"
#include "elastic/redis_store.h"
#include "tests/support/child_process.h"
#include "tests/support/http_get.h"
#include "tests/support/redis_server.h"
#include "tests/support/sentinel_cluster.h"
#include "tests/support/temp_dir.h"

namespace hdp::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

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

class StorePrimary : public ::testing::Test {
 protected:
  std::string hdp() const {
    const char* dir = std::getenv("HDP_BIN_DIR");
    return std::string(dir ? dir : "build/bin") + "/hdp";
  }
  // `hdp agent` for `node` on the sentinel URL, one sleeping worker, metrics on `metrics_port`.
  // lease 3000 ms: heartbeat 1 s, each store call bounded by 2 x 500 ms.
  std::unique_ptr<ChildProcess> start_agent(const std::string& node, int metrics_port) {
    return std::make_unique<ChildProcess>(
        std::vector<std::string>{hdp(), "agent", "--job", job_, "--redis", cluster_->url(), "--node-id", node,
                                 "--nproc-per-node", "1", "--nnodes", "1:2", "--lease-ms", "3000", "--settle-ms", "300",
                                 "--drain-timeout", "5", "--metrics-port", std::to_string(metrics_port),
                                 "--metrics-address", "127.0.0.1", "--", "/bin/sh", "-c", "exec sleep 1000"},
        (dir_.path() / (node + ".log")).string());
  }
  std::string agent_logs() const {
    std::string text;
    for (const char* node : {"n1", "n2"}) {
      std::ifstream in(dir_.path() / (std::string(node) + ".log"));
      text += "==== " + std::string(node) + "\n" + std::string(std::istreambuf_iterator<char>(in), {});
    }
    return text;
  }
  // A job key read through a fresh connection (immune to the failover); nullopt also when the
  // store cannot be reached right now.
  std::optional<std::string> get(const std::string& key) {
    try {
      elastic::RedisStoreOptions fast;
      fast.retry_timeout = 500ms;
      auto redis = std::make_shared<elastic::RedisStore>(cluster_->endpoint(), fast);
      return elastic::PrefixStore(redis, elastic::keys::job_namespace(job_)).get(key);
    } catch (const Error&) {
      return std::nullopt;
    }
  }
  // Polls `predicate` every 50 ms; the seconds it took, or -1 after `timeout`.
  static double wait_until(const std::function<bool()>& predicate, std::chrono::milliseconds timeout) {
    const auto start = Clock::now();
    while (Clock::now() - start < timeout) {
      if (predicate()) return std::chrono::duration<double>(Clock::now() - start).count();
      std::this_thread::sleep_for(50ms);
    }
    return -1;
  }
  CommandResult status(bool json) {
    std::vector<std::string> argv = {hdp(), "status", "--job", job_, "--redis", cluster_->url()};
    if (json) argv.push_back("--json");
    return run_command(argv, {}, 30s);
  }
  std::string scrape(int port) { return http_get(port, "/metrics", 2s).body; }
  void TearDown() override {
    if (HasFailure()) std::cerr << agent_logs().substr(0, 100000);
  }

  TempDir dir_{"hdp-store-primary"};
  std::unique_ptr<SentinelCluster> cluster_;
  std::string job_ = "store-primary";
};

TEST_F(StorePrimary, AgentsRecordThePrimaryAndCountAFailoverOnce) {
  const auto setup_start = Clock::now();
  cluster_ = std::make_unique<SentinelCluster>(SentinelClusterOptions{.replicas = 2, .sentinels = 3, .down_after = 1000ms});
  const int old_port = cluster_->primary_port();
  const std::string old_primary = "127.0.0.1:" + std::to_string(old_port);
  const int port1 = free_loopback_port(), port2 = free_loopback_port();
  auto n1 = start_agent("n1", port1);
  auto n2 = start_agent("n2", port2);

  // The first record: the primary, no failover.
  const double recorded = wait_until([&] { return get(elastic::keys::kStorePrimary) == old_primary; }, 30s);
  ASSERT_GE(recorded, 0) << "store_primary is " << get(elastic::keys::kStorePrimary).value_or("(none)");
  std::cout << "[ timing ] cluster up and first record in "
            << std::chrono::duration<double>(Clock::now() - setup_start).count() << " s (record " << recorded
            << " s after the agents started)" << std::endl;
  EXPECT_FALSE(get(elastic::keys::kStoreFailovers)) << "the first record is no failover";
  {
    const auto r = status(true);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto facts = nlohmann::json::parse(r.out);
    EXPECT_EQ(facts["store"], (nlohmann::json{{"primary", old_primary}, {"failovers", 0}})) << r.out;
    const auto text = status(false);
    EXPECT_NE(text.out.find("store: primary " + old_primary + ", 0 failover(s)\n"), std::string::npos) << text.out;
  }

  // SIGKILL the primary. Bound: the sentinels need down-after (1 s) plus an election and a
  // promotion, 1-4 s unloaded, and a failed election is retried only after 2 x failover-timeout
  // (10 s); then each agent's next heartbeat (1 s) reconnects through the sentinels (backoff
  // within its 500 ms budget) and records. 45 s leaves room for one failed election and for 2
  // cores shared with other tests (the sentinels' and the agents' timers slip under load).
  const auto killed = Clock::now();
  cluster_->kill_data(cluster_->data_index(old_port));
  const int first_port = cluster_->wait_for_primary_change(old_port, 45s);
  const double promoted = std::chrono::duration<double>(Clock::now() - killed).count();

  // What the job must show is what the sentinels did. One failover is what the kill asks for, but
  // on a loaded machine the sentinels may judge the freshly promoted primary down too (down-after
  // is 1 s) and fail over once more. The job counts the moves its agents saw, once each: at least
  // one, at most the sentinels' switches (an agent that reconnects after two switches moves once).
  // So the truth is read from the sentinels each time: their primary now, the switches they logged.
  std::string new_primary;
  std::size_t switches = 0;
  std::size_t failovers = 0;  // the job's count, once it agrees
  const auto job_agrees = [&] {
    try {
      switches = cluster_->primary_switches().size();
      new_primary = "127.0.0.1:" + std::to_string(cluster_->primary_port());
    } catch (const Error&) {
      return false;  // no sentinel answered this time
    }
    const auto counted = get(elastic::keys::kStoreFailovers);
    if (get(elastic::keys::kStorePrimary) != new_primary || !counted) return false;
    failovers = std::stoul(*counted);
    return failovers >= 1 && failovers <= switches;
  };
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(45s - (Clock::now() - killed));
  const double moved = wait_until(job_agrees, std::max(left, std::chrono::milliseconds(1000)));
  ASSERT_GE(moved, 0) << "store_primary " << get(elastic::keys::kStorePrimary).value_or("(none)")
                      << ", store_failovers " << get(elastic::keys::kStoreFailovers).value_or("(none)")
                      << "; the sentinels name " << new_primary << " after " << switches << " switch(es)";
  std::cout << "[ timing ] new primary 127.0.0.1:" << first_port << " named " << promoted
            << " s after the kill, the job agreed with the sentinels (" << new_primary << ", " << failovers
            << " failover(s)) " << std::chrono::duration<double>(Clock::now() - killed).count() << " s after it"
            << std::endl;
  if (switches > 1) std::cout << "[ note ] the sentinels failed over " << switches << " times" << std::endl;

  // Both agents see the move (their /metrics), and it stays counted once per move: a few
  // heartbeats later the count is still within [1, switches] (re-read, in case the sentinels moved
  // again; an over-count stays above, so the wait cannot hide one).
  for (int port : {port1, port2}) {
    std::string text;
    const double seen = wait_until(
        [&] {
          text = scrape(port);
          return sample(text, "hdp_agent_store_primary_info", "primary=\"" + new_primary + "\"") == 1 &&
                 sample(text, "hdp_agent_store_failovers_total") >= 1 &&
                 sample(text, "hdp_agent_store_failovers_total") <= static_cast<double>(switches);
        },
        15s);
    EXPECT_GE(seen, 0) << "port " << port << ":\n" << text;
    EXPECT_NE(text.find("# TYPE hdp_agent_store_primary_info gauge"), std::string::npos);
    EXPECT_NE(text.find("# TYPE hdp_agent_store_failovers_total counter"), std::string::npos);
    EXPECT_EQ(sample(text, "hdp_agent_store_primary_info", "primary=\"" + old_primary + "\""), -1)
        << "the old primary's series is gone\n" << text;
  }
  std::this_thread::sleep_for(3s);  // three heartbeats
  EXPECT_GE(wait_until(job_agrees, 5s), 0)
      << "counted once per move: store_failovers " << get(elastic::keys::kStoreFailovers).value_or("(none)")
      << ", the sentinels switched " << switches << " time(s)";
  // One agent counted each failover (and logged so); the other found the key equal.
  const std::string logs = agent_logs();
  for (std::size_t n = 1; n <= failovers; ++n) {
    const std::string line = "recorded as the job's failover " + std::to_string(n);
    std::size_t counted = 0;
    for (std::size_t at = 0; (at = logs.find(line, at)) != std::string::npos; ++at) ++counted;
    EXPECT_EQ(counted, 1u) << line << "\n" << logs;
  }
  EXPECT_EQ(logs.find("recorded as the job's failover " + std::to_string(failovers + 1)), std::string::npos) << logs;

  const auto r = status(true);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto facts = nlohmann::json::parse(r.out);
  EXPECT_EQ(facts["store"], (nlohmann::json{{"primary", new_primary}, {"failovers", failovers}})) << r.out;
  const auto text = status(false);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("store: primary " + new_primary + ", " + std::to_string(failovers) + " failover(s)\n"), std::string::npos) << text.out;
  EXPECT_TRUE(n1->running());
  EXPECT_TRUE(n2->running());
}

}  // namespace
}  // namespace hdp::test
