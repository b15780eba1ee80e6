// `hdp plan` as a user runs it: the summary, JSON, identical plans from separate processes, the
// cost model file, and one-line errors with exit code 2.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>

#include <nlohmann/json.hpp>

#include "mesh/plan/cost_model_json.h"
#include "tests/support/child_process.h"
#include "tests/support/temp_dir.h"

namespace hdp::test {
namespace {

std::string hdp_binary() {
  const char* dir = std::getenv("HDP_BIN_DIR");
  return std::string(dir ? dir : "build/bin") + "/hdp";
}

CommandResult hdp(std::vector<std::string> args) {
  args.insert(args.begin(), hdp_binary());
  return run_command(args, {}, std::chrono::seconds(30));
}

const std::vector<std::string> kDrawn = {"plan", "--ranks", "256", "--dist", "github", "--context", "262144",
                                         "--tokens", "8388608", "--seed", "7", "--json"};

TEST(PlanCli, JsonHasMakespanBoundAndImbalanceInOneUnit) {
  auto r = hdp(kDrawn);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto out = nlohmann::json::parse(r.out);
  EXPECT_EQ(out["strategy"], "balanced");
  EXPECT_EQ(out["time_unit"], "ms");
  EXPECT_EQ(out["tokens"], 8388608);
  const double makespan = out["makespan"], bound = out["bound"], imbalance = out["imbalance"];
  EXPECT_GE(makespan, bound);
  EXPECT_NEAR(imbalance, makespan / bound, 1e-9);
  EXPECT_GE(bound, out["work_bound"].get<double>());
  EXPECT_TRUE(out["ranks_per_sharded_sequence"].contains("max"));
  EXPECT_TRUE(out["micro_batches_per_rank"].contains("mean"));
}

TEST(PlanCli, TwoProcessesPrintTheSamePlan) {
  auto first = hdp(kDrawn);
  auto second = hdp(kDrawn);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_EQ(first.out, second.out);  // digest included: the whole plan, not only its summary
  auto other_seed = kDrawn;
  other_seed[10] = "8";
  EXPECT_NE(nlohmann::json::parse(hdp(other_seed).out)["digest"], nlohmann::json::parse(first.out)["digest"]);
}

TEST(PlanCli, StrategiesRankAsExpectedOnASkewedBatch) {
  double makespan[3];
  const char* names[3] = {"static", "naive", "balanced"};
  for (int i = 0; i < 3; ++i) {
    auto args = kDrawn;
    args.push_back("--strategy");
    args.push_back(names[i]);
    auto r = hdp(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    makespan[i] = nlohmann::json::parse(r.out)["makespan"];
  }
  EXPECT_GT(makespan[0], makespan[1]);
  EXPECT_GT(makespan[1], makespan[2]);
}

TEST(PlanCli, LengthsFileSpeedsAndTextSummary) {
  TempDir dir;
  const auto path = (dir.path() / "batch.txt").string();
  std::ofstream(path) << "20000 3000 3000 100\n0 7000\n";
  auto r = hdp({"plan", "--ranks", "4", "--lengths", path, "--speed", "1=0.5", "--strategy", "naive"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* word : {"makespan", "lower bound", "imbalance", "sharded", "micro-batches", "ring traffic"}) {
    EXPECT_NE(r.out.find(word), std::string::npos) << word << " missing from:\n" << r.out;
  }
  EXPECT_NE(r.out.find("5 sequences, 33100 tokens"), std::string::npos) << r.out;
}

TEST(PlanCli, SavedCostModelIsReadBack) {
  TempDir dir;
  const auto path = (dir.path() / "cost.json").string();
  auto saved = hdp({"plan", "--save-cost-model", path, "--link-gbps", "50"});
  ASSERT_EQ(saved.exit_code, 0) << saved.err;
  EXPECT_DOUBLE_EQ(mesh::load_cost_model(path).link_gbps, 50);
  auto args = kDrawn;
  args.insert(args.end(), {"--cost-model", path});
  auto r = hdp(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["cost_model"], "gpu-7b");
}

// A model small enough that calibration takes a fraction of a second.
const std::vector<std::string> kTinyCalibration = {"plan",   "--calibrate", "--threads", "1",   "--clock",   "cpu",
                                                   "--d-model", "32",      "--heads",   "1",   "--kv-heads", "1",
                                                   "--layers", "1",        "--ffn-dim", "64",  "--vocab",   "64",
                                                   "--capacity", "128",    "--repeats", "1"};

TEST(PlanCli, CalibrateWritesACostModelThatPlanReads) {
  TempDir dir;
  const auto path = (dir.path() / "cpu.json").string();
  auto args = kTinyCalibration;
  args.insert(args.end(), {"--out", path});
  auto r = hdp(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* word : {"alpha", "beta", "gamma", "residual", "measured ms", "fitted ms", "wrote"}) {
    EXPECT_NE(r.out.find(word), std::string::npos) << word << " missing from:\n" << r.out;
  }
  const mesh::CostModel model = mesh::load_cost_model(path);
  EXPECT_EQ(model.name, "cpu-llama-d32-l1");
  EXPECT_GT(model.alpha_ms + model.beta_ms, 0);
  std::ifstream in(path);
  EXPECT_EQ(nlohmann::json::parse(in)["calibration"]["model"]["d_model"], 32);

  const auto batch = (dir.path() / "batch.txt").string();
  std::ofstream(batch) << "100 60 200 20 128 7\n";
  r = hdp({"plan", "--ranks", "2", "--lengths", batch, "--capacity", "128", "--cost-model", path, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["cost_model"], "cpu-llama-d32-l1");
  // Calibrating and planning in one command plans with the fitted model.
  args = kTinyCalibration;
  args.insert(args.end(), {"--ranks", "2", "--lengths", batch});
  r = hdp(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("cost model cpu-llama-d32-l1"), std::string::npos) << r.out;
}

TEST(PlanCli, BadCalibrationOptionsExitTwoWithOneLine) {
  TempDir dir;
  const auto path = (dir.path() / "cost.json").string();
  // All are refused before anything is timed.
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"plan", "--out", path}, "--calibrate"},
      {{"plan", "--d-model", "64"}, "--calibrate"},
      {{"plan", "--calibrate", "--cost-model", path}, "excludes"},
      {{"plan", "--calibrate", "--capacity", "32"}, "capacity must be >= 64"},
      {{"plan", "--calibrate", "--repeats", "0"}, "repeats"},
      {{"plan", "--calibrate", "--heads", "3"}, "divisible"},
      {{"plan", "--calibrate", "--clock", "sundial"}, "sundial"},
      {{"plan", "--calibrate", "--clock", "cpu"}, "threads = 1"},
  };
  for (const auto& [args, needle] : cases) {
    auto r = hdp(args);
    EXPECT_EQ(r.exit_code, 2) << needle << ": " << r.err;
    EXPECT_EQ(line_count(r.err), 1) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  }
}

TEST(PlanCli, BadInputExitsTwoWithOneLine) {
  TempDir dir;
  const auto path = (dir.path() / "batch.txt").string();
  std::ofstream(path) << "100 90000\n";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"plan", "--ranks", "4", "--lengths", path}, "sequence 1 has 90000 tokens"},
      {{"plan", "--ranks", "4", "--lengths", path, "--speed", "2=0"}, "speed of rank 2"},
      {{"plan", "--ranks", "4", "--lengths", path, "--speed", "9=1"}, "rank must be in [0, 4)"},
      {{"plan", "--ranks", "4", "--dist", "zipf", "--context", "100", "--tokens", "100"}, "zipf"},
      {{"plan", "--ranks", "4", "--lengths", path, "--strategy", "best"}, "best"},
      {{"plan", "--ranks", "4"}, "--dist"},
      {{"plan", "--ranks", "4", "--lengths", (dir.path() / "missing").string()}, "missing"},
      // An override that is given is checked, never mistaken for "not given".
      {{"plan", "--ranks", "4", "--lengths", path, "--link-gbps", "nan"}, "link_gbps must be a finite number > 0"},
      {{"plan", "--ranks", "4", "--lengths", path, "--link-gbps", "-5"}, "link_gbps must be a finite number > 0"},
      {{"plan", "--ranks", "4", "--lengths", path, "--delta-ms", "nan"}, "delta_ms must be a finite number >= 0"},
      {{"plan", "--ranks", "4", "--lengths", path, "--delta-ms", "-1"}, "delta_ms must be a finite number >= 0"},
  };
  for (const auto& [args, needle] : cases) {
    auto r = hdp(args);
    EXPECT_EQ(r.exit_code, 2) << args.back() << ": " << r.err;
    EXPECT_EQ(line_count(r.err), 1) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace hdp::test
