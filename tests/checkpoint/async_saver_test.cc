// Asynchronous save: the caller stalls only for the copy into staging, at most one save is in
// flight (a second save waits for the first), and a failed background save keeps the previous
// checkpoint and fires the error hook. The writer is held at a fault point with a latch, so the
// tests never depend on timing for what they assert.
#include <gtest/gtest.h>

#include <future>
#include <latch>

#include "checkpoint/async_saver.h"
#include "checkpoint/checkpoint_root.h"
#include "checkpoint/local_group.h"
#include "common/error.h"
#include "tests/checkpoint/checkpoint_fixture.h"
#include "tests/support/temp_dir.h"

namespace hdp::checkpoint::test {
namespace {

class CheckpointAsync : public ::testing::Test {
 protected:
  ShardSnapshot whole(const FullState& state, std::int64_t step) { return snapshot_of(state, {0, layout_.total()}, 0, step); }

  hdp::test::TempDir dir_{"hdp-async"};
  CheckpointOptions options_ = small_options(dir_.path());
  FlatLayout layout_ = tiny_llama_layout();
  FullState first_ = make_state(layout_, 1);
  FullState second_ = make_state(layout_, 2);
  SoloGroup group_;
};

TEST_F(CheckpointAsync, ReturnsAfterStagingAndWritesTheStagedCopy) {
  std::latch reached(1), release(1);
  options_.fault_hook = [&](std::string_view point, int) {
    if (point == kPointBeforeRename) {
      reached.count_down();
      release.wait();
    }
  };
  AsyncSaver saver(options_, layout_, group_);
  FullState live = first_;
  const StageTiming timing = saver.save(whole(live, 10));
  EXPECT_GE(timing.copy_seconds, 0.0);
  reached.wait();  // the writer holds the staged copy and has not committed
  EXPECT_TRUE(list_committed(dir_.path()).empty());
  live = second_;  // training goes on and overwrites its buffers
  release.count_down();
  EXPECT_TRUE(saver.wait());
  const Restored restored = restore_on(2, small_options(dir_.path()), layout_);
  EXPECT_EQ(restored.progress[0]->step, 10);
  EXPECT_EQ(restored.state, first_);  // what was staged, not what the buffers hold now
}

TEST_F(CheckpointAsync, ASecondSaveWaitsForTheOneInFlight) {
  std::latch reached(1), release(1);
  bool held = false;  // used by the writer thread only: hold the first save, not the second
  options_.fault_hook = [&](std::string_view point, int) {
    if (point == kPointBeforeRename && !held) {
      held = true;
      reached.count_down();
      release.wait();
    }
  };
  AsyncSaver saver(options_, layout_, group_);
  saver.save(whole(first_, 10));
  reached.wait();
  auto second = std::async(std::launch::async, [&] { return saver.save(whole(second_, 20)); });
  // While the first save is held, the second cannot stage. 200 ms is far longer than staging
  // 85 KB takes, so a save that ignored the policy would have returned.
  EXPECT_EQ(second.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout);
  release.count_down();
  const StageTiming timing = second.get();
  EXPECT_GT(timing.wait_seconds, 0.1);
  EXPECT_TRUE(saver.wait());
  ASSERT_EQ(list_committed(dir_.path()).size(), 2u);
  EXPECT_EQ(restore_on(1, small_options(dir_.path()), layout_).state, second_);
}

TEST_F(CheckpointAsync, FailedBackgroundSaveKeepsThePreviousAndFiresTheErrorHook) {
  std::vector<ErrorInfo> errors;  // written by the writer thread, read after wait()
  options_.hooks.on_error = [&](const ErrorInfo& e) { errors.push_back(e); };
  int manifests = 0;  // used by the writer thread only: fail the second save
  options_.fault_hook = [&](std::string_view point, int) {
    if (point == kPointBeforeManifest && ++manifests == 2) throw FatalError("disk full (injected)");
  };
  AsyncSaver saver(options_, layout_, group_);
  saver.save(whole(first_, 10));
  EXPECT_TRUE(saver.wait());
  saver.save(whole(second_, 20));
  EXPECT_FALSE(saver.wait());
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].step, 20);
  EXPECT_NE(errors[0].message.find("disk full"), std::string::npos);
  const Restored restored = restore_on(2, small_options(dir_.path()), layout_);
  EXPECT_EQ(restored.progress[0]->step, 10);
  EXPECT_EQ(restored.state, first_);
}

TEST_F(CheckpointAsync, RanksSaveAsynchronouslyAndRestoreOnAnotherWorldSize) {
  const std::vector<ShardRange> ranges = uneven_ranges(layout_.total(), 3);
  run_ranks(3, [&](Group& group) {
    AsyncSaver saver(options_, layout_, group);
    const ShardRange range = ranges[static_cast<std::size_t>(group.rank())];
    saver.save(snapshot_of(first_, range, group.rank(), 10));
    saver.save(snapshot_of(second_, range, group.rank(), 20));  // waits for step 10 (policy)
    EXPECT_TRUE(saver.wait());
  });
  const Restored restored = restore_on(4, options_, layout_);
  EXPECT_EQ(restored.progress[3]->step, 20);
  EXPECT_EQ(restored.state, second_);
  EXPECT_EQ(list_committed(dir_.path()).size(), 2u);
}

TEST_F(CheckpointAsync, RejectsAShardThatDoesNotMatchItsRange) {
  AsyncSaver saver(options_, layout_, group_);
  ShardSnapshot shard = whole(first_, 10);
  shard.range.end -= 1;
  EXPECT_THROW(saver.save(shard), InvalidArgument);
}

}  // namespace
}  // namespace hdp::checkpoint::test
