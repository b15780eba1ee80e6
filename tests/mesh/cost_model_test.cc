// The cost model's formulas, the GPU preset, and its JSON file.
#include <gtest/gtest.h>

#include <fstream>

#include "common/error.h"
#include "mesh/plan/cost_model_json.h"
#include "tests/support/temp_dir.h"

namespace hdp::mesh {
namespace {

CostModel simple() {
  CostModel model;
  model.name = "simple";
  model.alpha_ms = 1e-3;
  model.beta_ms = 0.1;
  model.gamma_ms = 5;
  model.ring_bytes_per_token = 1000;
  model.link_gbps = 1;  // 1e6 bytes per ms: 1 ms per 1000 tokens on a rank
  return model;
}

TEST(CostModel, LocalMicroBatchIsGammaPlusQuadraticPlusLinear) {
  const CostModel model = simple();
  const std::vector<std::int64_t> lengths{100, 200};
  // 5 + 1e-3 (100² + 200²) + 0.1 · 300
  EXPECT_DOUBLE_EQ(model.micro_batch_ms(lengths, 1), 5 + 50 + 30);
  EXPECT_DOUBLE_EQ(model.ring_ms(1000, 1), 5 + 1000 + 100);
}

TEST(CostModel, RingHidesTransferOnlyBehindCompute) {
  const CostModel model = simple();
  // s = 4000 on D = 4: attention per rank 4000, step 1000 ms; transfer of 1000 tokens = 1 ms: hidden.
  EXPECT_DOUBLE_EQ(model.ring_ms(4000, 4), 5 + 0.1 * 1000 + 4 * 1000.0);
  // s = 400 on D = 4: step = 1e-3·160000/16 = 10 ms, transfer of 100 tokens = 0.1 ms: still hidden.
  CostModel slow_link = model;
  slow_link.link_gbps = 0.001;  // 1000 bytes per ms: 100 ms per step, not hidden
  EXPECT_DOUBLE_EQ(slow_link.ring_ms(400, 4), 5 + 0.1 * 100 + 10 + 3 * 100.0);
  EXPECT_DOUBLE_EQ(model.ring_bytes(400, 4), 3 * 1000.0 * 400);
}

TEST(CostModel, GpuPresetHasFlexSpCoefficients) {
  const CostModel model = gpu_preset_7b();
  EXPECT_DOUBLE_EQ(model.alpha_ms, 5.128e-6);
  EXPECT_NEAR(model.beta_ms, 0.184, 1e-3);
  EXPECT_NEAR(model.gamma_ms, 629, 1);
  EXPECT_DOUBLE_EQ(model.ring_bytes_per_token, 32 * 4096 * 3);
  EXPECT_DOUBLE_EQ(gpu_preset_7b(50).link_gbps, 50);
  EXPECT_NO_THROW(model.validate());
}

TEST(CostModel, JsonRoundTripThroughAFile) {
  test::TempDir dir;
  const std::string path = (dir.path() / "cost.json").string();
  const CostModel model = gpu_preset_7b(12.5);
  save_cost_model(model, path);
  const CostModel loaded = load_cost_model(path);
  EXPECT_EQ(cost_model_to_json(loaded), cost_model_to_json(model));
  CostModel plain = simple();
  save_cost_model(plain, path);
  EXPECT_FALSE(load_cost_model(path).offload.has_value());
}

TEST(CostModel, BadFilesNameTheProblem) {
  test::TempDir dir;
  const std::string path = (dir.path() / "cost.json").string();
  const auto error_for = [&](const std::string& text) -> std::string {
    std::ofstream(path) << text;
    try {
      load_cost_model(path);
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "(no error)";
  };
  EXPECT_NE(error_for("{not json").find("not JSON"), std::string::npos);
  EXPECT_NE(error_for(R"({"format":"other","version":1})").find("format"), std::string::npos);
  auto json = cost_model_to_json(simple());
  json.erase("beta_ms");
  EXPECT_NE(error_for(json.dump()).find("'beta_ms'"), std::string::npos);
  json = cost_model_to_json(simple());
  json["alpha_ms"] = -1;
  EXPECT_NE(error_for(json.dump()).find("alpha_ms"), std::string::npos);
  EXPECT_THROW(load_cost_model((dir.path() / "missing.json").string()), InvalidArgument);
}

}  // namespace
}  // namespace hdp::mesh
