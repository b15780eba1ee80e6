// The job's goodput as rank 0 reports it (trainer/goodput_report.h through StepReporter), over an
// in-memory store, and as Prometheus reads it (trainer/worker_metrics.h, merged the way an agent
// serves it):
//   - rank 0's step reports carry the goodput fields into the `state` hash; steps reported again
//     count as computed twice (the state and hdp_job_steps_recomputed_total);
//   - rank 0 of the next generation (the same process) continues its own totals; a new process
//     that becomes rank 0 continues the state's, and a worker that is no longer rank 0 drops its
//     hdp_job_effective_training_time_ratio;
//   - the exposition: the gauge, the counter and hdp_job_recovery_seconds{kind} with its buckets.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "elastic/job_keys.h"
#include "elastic/memory_store.h"
#include "metrics/registry.h"
#include "trainer/step_reporter.h"

namespace hdp::trainer {
namespace {

using namespace std::chrono_literals;

class GoodputReporting : public ::testing::Test {
 protected:
  void SetUp() override {
    config_.steps = 100;
    publish(1);
  }
  void publish(std::int64_t generation) { store_->set(elastic::keys::kGeneration, std::to_string(generation)); }
  void report(StepReporter& reporter, std::int64_t generation, int rank, std::int64_t step, double ms = 100) {
    mesh::StepResult result;
    result.loss_sum = 2.5;
    result.loss_tokens = 1;
    result.step_tokens = 1000;
    const std::vector<double> relative{1.0, 1.0}, plan{1.0, 1.0};
    elastic::Membership m;
    m.generation = generation;
    m.rank = rank;
    m.world_size = 2;
    reporter.step(m, step, result, ms, 1e-3, checkpoint::DataPosition{}, SpeedFigures{relative, plan});
  }
  // The state once rank 0's report of `step` was written (the reports are written by a thread).
  elastic::StateFields state_at(std::int64_t step) {
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    elastic::StateFields state;
    while (std::chrono::steady_clock::now() < deadline) {
      state = store_->hash_get_all(elastic::keys::kState);
      if (state["step"] == std::to_string(step) && state.count("ettr")) break;
      std::this_thread::sleep_for(5ms);
    }
    return state;
  }
  static double gauge(StepReporter& r, const char* name) { return r.metrics().registry().value(name, {}); }

  TrainerConfig config_;
  std::shared_ptr<elastic::MemoryStore> store_ = std::make_shared<elastic::MemoryStore>();
  EventLog events_{store_};
};

TEST_F(GoodputReporting, StepReportsCarryTheTotalsAcrossGenerationsAndProcesses) {
  StepReporter first(config_, store_, events_, "");
  for (int s = 1; s <= 5; ++s) report(first, 1, 0, s);
  auto state = state_at(5);
  EXPECT_EQ(state["productive_ms"], "500.0");
  EXPECT_EQ(state["furthest_step"], "5");
  EXPECT_EQ(state["recomputed_steps"], "0");
  const double ettr = std::stod(state["ettr"]);
  EXPECT_GT(ettr, 0);
  EXPECT_LE(ettr, 1);
  const std::string started = state["started_at_ms"];
  ASSERT_FALSE(started.empty());
  for (const auto& [name, value] : state) EXPECT_NO_THROW(elastic::validate_state_field(name, value)) << name;
  EXPECT_GT(gauge(first, "hdp_job_effective_training_time_ratio"), 0);

  // A rollback to step 3: steps 4 and 5 again, in generation 2 (the same process is rank 0).
  publish(2);
  report(first, 2, 0, 4);
  report(first, 2, 0, 5);
  report(first, 2, 0, 6);
  state = state_at(6);
  EXPECT_EQ(state["recomputed_steps"], "2");
  EXPECT_EQ(state["recomputed_ms"], "200.0");
  EXPECT_EQ(state["productive_ms"], "600.0");
  EXPECT_EQ(state["started_at_ms"], started);
  EXPECT_EQ(gauge(first, "hdp_job_steps_recomputed_total"), 2);

  // Generation 3: another process is rank 0, restored from step 5; the first is rank 1.
  publish(3);
  StepReporter second(config_, store_, events_, "");
  report(second, 3, 0, 6);
  report(first, 3, 1, 6);
  report(second, 3, 0, 7);
  state = state_at(7);
  EXPECT_EQ(state["started_at_ms"], started);
  EXPECT_EQ(state["recomputed_steps"], "3");
  EXPECT_EQ(state["productive_ms"], "700.0");
  EXPECT_EQ(state["furthest_step"], "7");
  EXPECT_EQ(gauge(second, "hdp_job_steps_recomputed_total"), 1);
  EXPECT_GT(gauge(second, "hdp_job_effective_training_time_ratio"), 0);
  EXPECT_EQ(gauge(first, "hdp_job_effective_training_time_ratio"), -1) << "rank 1 exports no ETTR";
}

TEST_F(GoodputReporting, TheExpositionHasTheRatioTheRecomputedStepsAndRecoveriesByKind) {
  WorkerMetrics worker("");
  worker.goodput(0.8, false);
  worker.goodput(0.75, true);
  worker.job_recovered("memory", 3.2);
  worker.job_recovered("memory", 0.4);
  worker.job_recovered("checkpoint", 45);
  metrics::Registry agent;
  agent.merge(worker.registry(), {{"hdp_job", "j"}, {"node", "n1"}, {"slot", "0"}});
  const std::string text = agent.text();
  const std::string labels = "hdp_job=\"j\",node=\"n1\",slot=\"0\"";
  EXPECT_NE(text.find("# TYPE hdp_job_effective_training_time_ratio gauge\n"), std::string::npos) << text;
  EXPECT_NE(text.find("hdp_job_effective_training_time_ratio{" + labels + "} 0.75\n"), std::string::npos) << text;
  EXPECT_NE(text.find("# TYPE hdp_job_steps_recomputed_total counter\n"), std::string::npos);
  EXPECT_NE(text.find("hdp_job_steps_recomputed_total{" + labels + "} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("# TYPE hdp_job_recovery_seconds histogram\n"), std::string::npos);
  const std::string memory = "hdp_job=\"j\",kind=\"memory\",node=\"n1\",slot=\"0\"";
  EXPECT_NE(text.find("hdp_job_recovery_seconds_bucket{" + memory + ",le=\"0.25\"} 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("hdp_job_recovery_seconds_bucket{" + memory + ",le=\"0.5\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("hdp_job_recovery_seconds_bucket{" + memory + ",le=\"5\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("hdp_job_recovery_seconds_bucket{" + memory + ",le=\"300\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("hdp_job_recovery_seconds_count{" + memory + "} 2\n"), std::string::npos) << text;
  const std::string checkpoint = "hdp_job=\"j\",kind=\"checkpoint\",node=\"n1\",slot=\"0\"";
  EXPECT_NE(text.find("hdp_job_recovery_seconds_bucket{" + checkpoint + ",le=\"30\"} 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("hdp_job_recovery_seconds_bucket{" + checkpoint + ",le=\"60\"} 1\n"), std::string::npos) << text;
  // No longer rank 0: the gauge goes, its family (and the counter) stay.
  worker.not_goodput_reporter();
  metrics::Registry after;
  after.merge(worker.registry(), {{"node", "n1"}});
  const std::string later = after.text();
  EXPECT_EQ(later.find("hdp_job_effective_training_time_ratio{"), std::string::npos) << later;
  EXPECT_NE(later.find("# TYPE hdp_job_effective_training_time_ratio gauge"), std::string::npos);
  EXPECT_NE(later.find("hdp_job_steps_recomputed_total{node=\"n1\"} 1\n"), std::string::npos) << later;
}

}  // namespace
}  // namespace hdp::trainer
