// Save on N thread-ranks, restore on M, for all N, M in {1, 2, 3, 4, 8}, with uneven shards that
// cut tensors anywhere and checksum blocks (16 floats) that the new ranges cut too: parameters and
// both moments come back bitwise equal, with step, RNG states and data position.
#include <gtest/gtest.h>

#include <cstring>
#include <tuple>

#include "checkpoint/manifest.h"
#include "tests/checkpoint/checkpoint_fixture.h"
#include "tests/support/temp_dir.h"

namespace hdp::checkpoint::test {
namespace {

class CheckpointReshard : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(CheckpointReshard, RestoresBitwiseOntoAnotherWorldSize) {
  const auto [saved_on, restored_on] = GetParam();
  hdp::test::TempDir dir("hdp-reshard");
  const CheckpointOptions options = small_options(dir.path());
  const FlatLayout layout = tiny_llama_layout();
  const FullState state = make_state(layout, 11);
  save_on(saved_on, options, layout, state, 120);

  const Restored restored = restore_on(restored_on, options, layout);
  // memcmp-level equality: std::vector<float>== would also accept -0 for +0.
  for (std::size_t b = 0; b < kBufferCount; ++b) {
    ASSERT_EQ(0, std::memcmp(restored.state.buffers[b].data(), state.buffers[b].data(), state.buffers[b].size() * sizeof(float)))
        << kBufferNames[b];
  }
  for (const auto& progress : restored.progress) {
    ASSERT_TRUE(progress.has_value());
    EXPECT_EQ(progress->step, 120);
    EXPECT_EQ(progress->data, data_position(120));
    EXPECT_EQ(progress->path.filename(), "step-00000120");
    ASSERT_EQ(std::ssize(progress->rng_states), saved_on);
    for (int r = 0; r < saved_on; ++r) EXPECT_EQ(progress->rng_states[static_cast<std::size_t>(r)], rng_bytes(r, 120));
  }
  const Manifest manifest = read_manifest(dir.path() / "step-00000120");
  EXPECT_EQ(manifest.world_size, saved_on);
}

std::string name(const ::testing::TestParamInfo<std::tuple<int, int>>& info) {
  return "save" + std::to_string(std::get<0>(info.param)) + "_restore" + std::to_string(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(AllPairs, CheckpointReshard,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 8), ::testing::Values(1, 2, 3, 4, 8)), name);

}  // namespace
}  // namespace hdp::checkpoint::test
