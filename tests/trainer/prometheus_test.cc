// A real Prometheus server (Debian's `prometheus`) scrapes the two agents of a running job, as an
// operator's would, and its HTTP API answers with what hdp exported:
//   - the job's step and loss series, from both nodes' workers (hdp_train_step, hdp_train_loss,
//     over a range of at least 3 scrapes), with steps that rise, and the held-out loss
//     (hdp_train_eval_loss, --eval-data every 2 steps);
//   - hdp_train_recoveries_total of the surviving node goes up after the other node's agent (and
//     with it its worker) is SIGKILLed: the job resized and recovered within lease (2 s) + 20 s of
//     slack for the restore and the scrapes (1 s apart) under CI's load.
// Real `hdp agent` processes with real `hdp train` workers (the tiny model), a private
// redis-server; Prometheus on a free loopback port with its own data directory.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/agents/agent_cluster.h"
#include "tests/support/child_process.h"
#include "tests/support/http_get.h"
#include "tests/support/temp_dir.h"

namespace hdp::test {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

constexpr const char* kPrometheus = "/usr/bin/prometheus";

class PrometheusScrape : public ::testing::Test {
 protected:
  // GET /api/v1/<endpoint>?query=...; the "result" array (empty on any error).
  json query(const std::string& endpoint, const std::string& promql, const std::string& extra = "") {
    const HttpResult r =
        http_get(prometheus_port_, "/api/v1/" + endpoint + "?query=" + url_encode(promql) + extra, 5s);
    if (r.status != 200) return json::array();
    const json doc = json::parse(r.body, nullptr, false);
    if (doc.is_discarded() || doc.value("status", "") != "success") return json::array();
    return doc["data"]["result"];
  }
  // The value of an instant query's single series, or -1.
  double scalar(const std::string& promql) {
    const json result = query("query", promql);
    if (result.size() != 1) return -1;
    return std::stod(result[0]["value"][1].get<std::string>());
  }
  void TearDown() override {
    if (HasFailure() && cluster_) {
      std::cerr << cluster_->all_logs().substr(0, 100000);
      std::ifstream in(dir_.path() / "prometheus.log");
      std::cerr << std::string(std::istreambuf_iterator<char>(in), {}).substr(0, 20000);
    }
  }

  TempDir dir_;
  std::unique_ptr<AgentCluster> cluster_;
  std::unique_ptr<ChildProcess> prometheus_;
  int prometheus_port_ = 0;
};

TEST_F(PrometheusScrape, StepLossAndRecoveriesOfARunningJob) {
  if (!std::filesystem::exists(kPrometheus)) GTEST_SKIP() << kPrometheus << " is not installed (scripts/install-deps.sh)";
  ClusterOptions o;
  o.nnodes = "1:2";
  o.nproc = 1;
  o.train_args = tiny_trainer_args((dir_.path() / "ckpt").string(), 2048, 20);
  for (const char* arg : {"--eval-data", "/usr/share/common-licenses", "--eval-every", "2", "--eval-tokens", "1000"})
    o.train_args.push_back(arg);
  cluster_ = std::make_unique<AgentCluster>(o);
  const int port1 = free_loopback_port(), port2 = free_loopback_port();
  for (const auto& [node, port] : {std::pair{"n1", port1}, std::pair{"n2", port2}}) {
    cluster_->start_agent(node, {"--metrics-port", std::to_string(port), "--metrics-address", "127.0.0.1"});
  }
  ASSERT_GE(cluster_->wait_for_members({"n1", "n2"}, 30s), 0);

  std::ofstream(dir_.path() / "prometheus.yml")
      << "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
      << "scrape_configs:\n  - job_name: hdp\n    static_configs:\n      - targets: ['127.0.0.1:" << port1
      << "', '127.0.0.1:" << port2 << "']\n";
  prometheus_port_ = free_loopback_port();
  prometheus_ = std::make_unique<ChildProcess>(
      std::vector<std::string>{kPrometheus, "--config.file=" + (dir_.path() / "prometheus.yml").string(),
                               "--storage.tsdb.path=" + (dir_.path() / "tsdb").string(),
                               "--web.listen-address=127.0.0.1:" + std::to_string(prometheus_port_),
                               "--log.level=warn"},
      (dir_.path() / "prometheus.log").string());

  // Both targets up, and both nodes' workers' step series with at least 3 samples each.
  const double up = cluster_->wait_until([&] { return scalar("sum(up{job=\"hdp\"})") == 2; }, 60s);
  ASSERT_GE(up, 0) << "Prometheus never saw both agents up";
  json steps;
  ASSERT_GE(cluster_->wait_until(
                [&] {
                  steps = query("query", "hdp_train_step[30s]");
                  if (steps.size() != 2) return false;
                  for (const auto& s : steps) {
                    if (s["values"].size() < 3) return false;
                  }
                  return true;
                },
                60s),
            0)
      << steps.dump();
  for (const auto& series : steps) {
    EXPECT_EQ(series["metric"]["hdp_job"], cluster_->job());
    EXPECT_EQ(series["metric"]["slot"], "0");
    const auto& values = series["values"];
    EXPECT_GT(std::stod(values.back()[1].get<std::string>()), std::stod(values.front()[1].get<std::string>()))
        << "the step did not rise: " << series.dump();
  }
  const json loss = query("query", "hdp_train_loss");
  ASSERT_EQ(loss.size(), 2u) << loss.dump();
  for (const auto& series : loss) {
    const double value = std::stod(series["value"][1].get<std::string>());
    EXPECT_GT(value, 0);
    EXPECT_LT(value, 10) << "a byte-level model's loss starts near ln(256) = 5.5";
  }
  // The held-out loss (--eval-data every 2 steps), from both workers too.
  const json eval = query("query", "hdp_train_eval_loss");
  ASSERT_EQ(eval.size(), 2u) << eval.dump();
  for (const auto& series : eval) {
    const double value = std::stod(series["value"][1].get<std::string>());
    EXPECT_GT(value, 0);
    EXPECT_LT(value, 10);
  }
  ASSERT_EQ(scalar("hdp_train_recoveries_total{node=\"n1\"}"), 0);

  // SIGKILL n2's agent (its worker goes with it): n1's worker recovers and counts it.
  cluster_->agent("n2").kill();
  const auto killed = std::chrono::steady_clock::now();
  const double recovered = cluster_->wait_until([&] { return scalar("hdp_train_recoveries_total{node=\"n1\"}") >= 1; }, 60s);
  ASSERT_GE(recovered, 0) << "no recovery counted";
  EXPECT_LT(std::chrono::steady_clock::now() - killed, 2s + 20s);
  EXPECT_GE(scalar("increase(hdp_train_recoveries_total{node=\"n1\"}[2m])"), 0.9);
  // The agent's own view follows at its next heartbeat (lease/3) and Prometheus' next scrape (1 s).
  EXPECT_GE(cluster_->wait_until([&] { return scalar("sum(up{job=\"hdp\"})") == 1; }, 10s), 0)
      << "the killed agent's target is still up";
  EXPECT_GE(cluster_->wait_until([&] { return scalar("hdp_job_world_size{node=\"n1\"}") == 1; }, 10s), 0)
      << "the survivor's agent never reported the smaller generation";
}

}  // namespace
}  // namespace hdp::test
