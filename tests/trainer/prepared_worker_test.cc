// What a standby worker prepares before it is given a slot (trainer/training_setup.h,
// PreparedWorker): the setup, and on the CPU the model's buffers, which the trainer takes when its
// slot's placement matches and replaces otherwise.
#include <gtest/gtest.h>

#include "tests/trainer/tiny_config.h"
#include "trainer/training_setup.h"

namespace hdp::trainer {
namespace {

TrainerConfig config() { return tiny_config(); }

TEST(PreparedWorker, OnTheCpuTheModelsBuffersArePreparedWithTheSetup) {
  const TrainerConfig c = config();
  PreparedWorker prepared = prepare_worker(c);
  ASSERT_TRUE(prepared.model.has_value());
  EXPECT_EQ(prepared.model->params().numel(), prepared.setup.layout.total());
  EXPECT_EQ(prepared.model->params().device(), ops::Device::kCpu);
  EXPECT_EQ(prepared.model->precision(), c.precision);
  ASSERT_NE(prepared.setup.data, nullptr);
}

TEST(PreparedWorker, TheTrainerTakesThePreparedBuffersWhenItsPlacementMatches) {
  const TrainerConfig c = config();
  PreparedWorker prepared = prepare_worker(c);
  const void* buffer = prepared.model->params().data<float>();
  const ops::model::LlamaModel model = take_model(prepared.model, c);
  EXPECT_EQ(model.params().data<float>(), buffer) << "the prepared buffers, not new ones";
  EXPECT_FALSE(prepared.model.has_value()) << "taken once";
}

TEST(PreparedWorker, AnotherPrecisionOrNoneGetsANewModel) {
  TrainerConfig c = config();
  PreparedWorker prepared = prepare_worker(c);
  c.precision = ops::model::Precision::kBF16;
  const ops::model::LlamaModel model = take_model(prepared.model, c);
  EXPECT_EQ(model.precision(), ops::model::Precision::kBF16) << "a model built for this slot, not the prepared f32 one";
  EXPECT_FALSE(prepared.model.has_value()) << "the unused buffers are freed";

  std::optional<ops::model::LlamaModel> none;
  const ops::model::LlamaModel fresh = take_model(none, c);
  EXPECT_EQ(fresh.params().numel(), prepared.setup.layout.total());
}

}  // namespace
}  // namespace hdp::trainer
