// Calibration against the real model (ops/model LlamaModel on the CPU): the packings it times, its
// options, the file it writes, and (the point of it) that the fitted cost model predicts the time
// of micro-batches it was not fitted on.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <utility>

#include "common/error.h"
#include "common/median.h"
#include "mesh/plan/calibration.h"
#include "mesh/plan/cost_model_json.h"
#include "mesh/plan/length_distribution.h"
#include "mesh/plan/speed_tracker.h"
#include "ops/host_memory.h"
#include "tests/support/temp_dir.h"

namespace hdp::mesh {
namespace {

// Small enough to time in seconds, with attention a large share of a long sequence's time (one head
// of 64 dims against a 128-wide MLP), so the quadratic term is exercised.
ops::model::LlamaConfig tiny_model() {
  ops::model::LlamaConfig c;
  c.vocab_size = 64;
  c.d_model = 64;
  c.n_layers = 2;
  c.n_heads = 1;
  c.n_kv_heads = 1;
  c.ffn_dim = 128;
  return c;
}

std::int64_t tokens_of(const std::vector<std::int64_t>& lengths) {
  return std::accumulate(lengths.begin(), lengths.end(), std::int64_t{0});
}

TEST(Calibration, PackingsSpanLengthsAndPackingsUpToC) {
  const auto packings = calibration_packings(1024);
  ASSERT_EQ(packings.size(), 12u);
  EXPECT_EQ(packings.front(), std::vector<std::int64_t>{1024});
  // Down to the tails a plan ends ranks with: a single sequence of C/32 tokens.
  EXPECT_NE(std::find(packings.begin(), packings.end(), std::vector<std::int64_t>{32}), packings.end());
  std::int64_t most = 0;
  std::size_t most_sequences = 0;
  for (const auto& lengths : packings) {
    most = std::max(most, tokens_of(lengths));
    most_sequences = std::max(most_sequences, lengths.size());
    for (std::int64_t s : lengths) EXPECT_GE(s, 32);
  }
  EXPECT_EQ(most, 1024);
  EXPECT_EQ(most_sequences, 32u);
  EXPECT_THROW(calibration_packings(63), InvalidArgument);
}

TEST(Calibration, BadOptionsAreRejectedBeforeAnythingIsTimed) {
  const auto error_of = [](CalibrationOptions o) -> std::string {
    try {
      calibrate(o);
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "(no error)";
  };
  CalibrationOptions o;
  o.capacity = 10;
  EXPECT_NE(error_of(o).find("capacity must be >= 64"), std::string::npos);
  o = {};
  o.repeats = 0;
  EXPECT_NE(error_of(o).find("repeats"), std::string::npos);
  o = {};
  o.model.n_heads = 3;
  EXPECT_NE(error_of(o).find("divisible"), std::string::npos);
  o = {};
  o.clock = TimingClock::kThreadCpu;  // with OpenMP's default thread count
  EXPECT_NE(error_of(o).find("threads = 1"), std::string::npos);
  o = {};
  o.link_gbps = 0;
  EXPECT_NE(error_of(o).find("link_gbps"), std::string::npos);
  EXPECT_THROW(parse_clock("sundial"), InvalidArgument);
}

TEST(Calibration, WritesACostModelFileWithWhereAndHowItWasMeasured) {
  CalibrationOptions o;
  o.model = tiny_model();
  o.capacity = 128;
  o.repeats = 1;
  o.threads = 1;
  o.clock = TimingClock::kThreadCpu;
  const Calibration c = calibrate(o);
  ASSERT_EQ(c.samples.size(), calibration_packings(128).size());
  for (const CostSample& s : c.samples) EXPECT_GT(s.measured_ms, 0);
  EXPECT_EQ(c.cost.name, "cpu-llama-d64-l2");
  // K and V of one 64-dim head in f32, 2 layers, sent 3 times (forward, backward, dKV).
  EXPECT_EQ(c.cost.ring_bytes_per_token, 3 * 2 * 2 * 64 * 4);

  test::TempDir dir;
  const std::string path = (dir.path() / "cpu.json").string();
  save_cost_model(c.cost, path, c.record);
  const CostModel loaded = load_cost_model(path);
  EXPECT_EQ(cost_model_to_json(loaded), cost_model_to_json(c.cost));
  std::ifstream in(path);
  const nlohmann::json file = nlohmann::json::parse(in);
  const nlohmann::json& record = file.at("calibration");
  EXPECT_EQ(record.at("model").at("d_model"), 64);
  EXPECT_EQ(record.at("capacity"), 128);
  EXPECT_EQ(record.at("clock"), "cpu");
  EXPECT_EQ(record.at("machine").at("threads"), 1);
  EXPECT_EQ(record.at("samples").size(), c.samples.size());
}

// time_rounds keeps every run, per micro-batch in the caller's order whatever order the rounds ran
// in: the longest micro-batch is the slowest in every round.
TEST(Calibration, TimeRoundsKeepsEveryRunOfEveryMicroBatch) {
  ops::model::LlamaModel model(tiny_model());
  model.init(1);
  const std::vector<std::vector<std::int64_t>> micro_batches{{16}, {512}, {8, 8}};
  const auto runs = time_rounds(model, micro_batches, 4, TimingClock::kThreadCpu, 7);
  ASSERT_EQ(runs.size(), micro_batches.size());
  for (std::size_t k = 0; k < 4; ++k) {
    for (const auto& r : runs) {
      ASSERT_EQ(r.size(), 4u);
      EXPECT_GT(r[k], 0);
    }
    // 512 tokens against 16: 32x the tokens; slower by far more than any scatter.
    EXPECT_GT(runs[1][k], 3 * runs[0][k]) << "round " << k;
    EXPECT_GT(runs[1][k], 3 * runs[2][k]) << "round " << k;
  }
  EXPECT_THROW(time_rounds(model, micro_batches, 0, TimingClock::kThreadCpu), InvalidArgument);
}

// The check behind "the calibrated cost model predicts a planned micro-batch", made as the planner
// predicts: the cost model over a speed factor that a SpeedTracker takes from what ran beside it.
// Micro-batches the fit never saw (a drawn batch cut into micro-batches of at most C tokens, as the
// planner packs them) are timed in the same shuffled rounds as the calibration's own, on the
// thread's CPU clock. The fit is made on the calibration micro-batches' medians, as `calibrate`
// makes it; in each round, the speed factor is Σ fitted / Σ measured over the calibration
// micro-batches of that round, and a held-out micro-batch's error in that round is
// fitted / speed / measured − 1. Its error is the median over the rounds.
//
// Why per round: this machine's core changes speed by tens of per cent within seconds (one round
// ran every micro-batch about 30% faster than the rounds beside it), so medians of a few rounds
// moved by up to about 10% between runs, and beside three other test cases on CI's two cores a
// held-out median was once 32% off. The speed factor takes out what a round's micro-batches share.
//
// Tolerance 30%, not the 15%: fifteen rounds, not the forty bench_calibration takes to
// measure the 15% figure on the real model (docs/performance.md), and the three-term model's own
// misfit on this tiny one reaches about 6% (two sequences of C/2 run that much faster than the
// fit). Alone, the worst held-out micro-batch was 6-13% off over 50 runs; three copies of this
// test at once on two cores, 7-12% over nine; in CI, beside the other suites on two cores, one run
// had two sequences of 779 tokens 21% off (the round speed factors spanned 0.83-1.13: contention
// slows the memory-bound short-sequence work more than the GEMMs, which a factor per round cannot
// take out). A wrong model fails by far more: without the quadratic term one sequence of C tokens
// and 32 sequences of C/32 would be predicted alike, and they differ about 2x (100%) here.
TEST(Calibration, FitPredictsMicroBatchesItWasNotFittedOn) {
#if defined(__SANITIZE_ADDRESS__)
  // Under AddressSanitizer the model's own loops are instrumented and OpenBLAS's are not, so the
  // times follow the instrumentation rather than the model (a held-out micro-batch was once 52% off
  // there); the other calibration tests still run this code under the sanitizers.
  GTEST_SKIP() << "timing accuracy is not meaningful under AddressSanitizer";
#endif
  // The micro-batches are timed as `hdp plan --calibrate` times them, in a process that keeps the
  // memory it freed (ops/host_memory.h): with glibc's defaults each one faulted in again what the
  // one before had freed, and on one machine the held-out error was 46% (8-10% with it).
  ops::retain_freed_host_memory();
  constexpr std::int64_t kCapacity = 1024;
  constexpr int kRounds = 15;
  std::vector<std::vector<std::int64_t>> packings = calibration_packings(kCapacity);
  const std::size_t fitted_on = packings.size();
  std::vector<std::int64_t> current;
  for (std::int64_t s : draw_batch(named_distribution("github"), kCapacity, 6 * kCapacity, 5)) {
    if (tokens_of(current) + s > kCapacity) packings.push_back(std::exchange(current, {}));
    current.push_back(s);
  }
  ASSERT_GT(packings.size(), fitted_on + 3);

  ops::model::LlamaModel model(tiny_model());
  model.init(1);
  const std::vector<std::vector<double>> runs = time_rounds(model, packings, kRounds, TimingClock::kThreadCpu, 1);
  std::vector<CostSample> samples;
  for (std::size_t i = 0; i < fitted_on; ++i) samples.push_back({packings[i], median(runs[i])});
  CostModel fitted;
  fit_compute_cost(samples, fitted);
  // Attention is about half of a C-token sequence here, so the held-out check tests the quadratic term.
  EXPECT_GT(fitted.alpha_ms * kCapacity * kCapacity, 0.3 * samples[0].measured_ms);

  std::vector<double> speeds;  // per round
  for (int k = 0; k < kRounds; ++k) {
    double planned = 0, took = 0;
    for (std::size_t i = 0; i < fitted_on; ++i) {
      planned += fitted.micro_batch_ms(packings[i], 1);
      took += runs[i][k];
    }
    SpeedTracker tracker;
    tracker.report("round", planned, took);
    speeds.push_back(tracker.filtered("round"));
  }
  double worst = 0;
  for (std::size_t i = fitted_on; i < packings.size(); ++i) {
    const double predicted = fitted.micro_batch_ms(packings[i], 1);
    std::vector<double> errors;
    for (int k = 0; k < kRounds; ++k) errors.push_back(predicted / speeds[k] / runs[i][k] - 1);
    const double error = median(errors);
    worst = std::max(worst, std::abs(error));
    EXPECT_LT(std::abs(error), 0.30) << packings[i].size() << " sequences, " << tokens_of(packings[i])
                                     << " tokens: predicted " << predicted << " ms at speed 1, off by "
                                     << 100 * error << "% in the median round";
  }
  std::printf("worst held-out error %.1f%% over %zu micro-batches (load average %.2f); speed factor per round:",
              100 * worst, packings.size() - fitted_on, load_average());
  for (double speed : speeds) std::printf(" %.2f", speed);
  std::printf("\n");
}

}  // namespace
}  // namespace hdp::mesh
