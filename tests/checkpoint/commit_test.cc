// The commit protocol on real files: hooks, `latest`, retention, refusals, and failures that must
// leave the previous committed checkpoint in place.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>

#include "checkpoint/checkpoint_root.h"
#include "checkpoint/local_group.h"
#include "checkpoint/restorer.h"
#include "checkpoint/saver.h"
#include "common/error.h"
#include "tests/checkpoint/checkpoint_fixture.h"
#include "tests/support/temp_dir.h"

namespace hdp::checkpoint::test {
namespace {
namespace fs = std::filesystem;

class CheckpointCommit : public ::testing::Test {
 protected:
  hdp::test::TempDir dir_{"hdp-commit"};
  CheckpointOptions options_ = small_options(dir_.path());
  FlatLayout layout_ = tiny_llama_layout();
  FullState first_ = make_state(layout_, 1);
  FullState second_ = make_state(layout_, 2);
};

TEST_F(CheckpointCommit, CommitHookReportsStepPathBytesAndUpdatesLatest) {
  std::mutex mutex;
  std::vector<CommitInfo> commits;  // guarded by mutex
  options_.hooks.on_commit = [&](const CommitInfo& info) {
    std::lock_guard lock(mutex);
    commits.push_back(info);
  };
  save_on(3, options_, layout_, first_, 10);
  ASSERT_EQ(commits.size(), 1u);  // rank 0 only
  EXPECT_EQ(commits[0].step, 10);
  EXPECT_EQ(commits[0].path, dir_.path() / "step-00000010");
  EXPECT_EQ(commits[0].bytes, bytes_under(dir_.path() / "step-00000010"));
  EXPECT_GT(commits[0].seconds, 0.0);
  EXPECT_EQ(read_latest(dir_.path()), "step-00000010");
  // Only the rank files and the manifest: the per-rank records were merged and removed.
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir_.path() / "step-00000010")) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"manifest.json", "rank-00000.h5", "rank-00001.h5", "rank-00002.h5"}));
  EXPECT_TRUE(list_uncommitted(dir_.path()).empty());
}

TEST_F(CheckpointCommit, KeepsTheNewestKAfterEachCommit) {
  options_.keep = 2;
  for (std::int64_t step : {10, 20, 30, 40}) save_on(2, options_, layout_, first_, step);
  EXPECT_EQ(committed_steps(dir_.path()), (std::vector<std::int64_t>{30, 40}));
  EXPECT_TRUE(list_uncommitted(dir_.path()).empty());
  EXPECT_EQ(read_latest(dir_.path()), "step-00000040");
}

TEST_F(CheckpointCommit, RefusesAStepThatIsAlreadyCommitted) {
  save_on(2, options_, layout_, first_, 10);
  std::mutex mutex;
  std::vector<ErrorInfo> errors;  // guarded by mutex
  options_.hooks.on_error = [&](const ErrorInfo& e) {
    std::lock_guard lock(mutex);
    errors.push_back(e);
  };
  EXPECT_THROW(save_on(2, options_, layout_, second_, 10), InvalidArgument);
  EXPECT_EQ(restore_on(1, options_, layout_).state, first_);
  // Both ranks refuse, but the job state should hear of it once: rank 0 is the primary reporter.
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_EQ(errors[0].primary + errors[1].primary, 1);
  EXPECT_EQ(errors[0].operation, Operation::kSave);
}

TEST_F(CheckpointCommit, RestoreRefusesAnotherModelConfig) {
  save_on(2, options_, layout_, first_, 10);
  CheckpointOptions other = options_;
  other.model_config["hidden_size"] = 32;
  try {
    restore_on(2, other, layout_);
    FAIL() << "restored a checkpoint of another model";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("model config"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("step-00000010"), std::string::npos) << e.what();
  }
  FlatLayout renamed({{"model.embed_tokens.weight", {37 * 16}}, {"rest", {layout_.total() - 37 * 16}}});
  EXPECT_THROW(restore_on(2, options_, renamed), InvalidArgument);
}

TEST_F(CheckpointCommit, NoCheckpointMeansAFreshStart) {
  const Restored restored = restore_on(2, options_, layout_);
  EXPECT_FALSE(restored.progress[0].has_value());
  EXPECT_FALSE(restored.progress[1].has_value());
}

TEST_F(CheckpointCommit, FailedCommitKeepsThePreviousAndFiresTheErrorHook) {
  save_on(2, options_, layout_, first_, 10);
  std::vector<ErrorInfo> errors;  // rank 0 alone reaches the failing point
  options_.hooks.on_error = [&](const ErrorInfo& e) { errors.push_back(e); };
  options_.fault_hook = [](std::string_view point, int) {
    if (point == kPointBeforeRename) throw FatalError("injected fault before the rename");
  };
  EXPECT_THROW(save_on(2, options_, layout_, second_, 20), FatalError);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].step, 20);
  EXPECT_NE(errors[0].message.find("injected fault"), std::string::npos);
  EXPECT_EQ(committed_steps(dir_.path()), (std::vector<std::int64_t>{10}));
  EXPECT_EQ(read_latest(dir_.path()), "step-00000010");

  options_.fault_hook = nullptr;
  const Restored restored = restore_on(3, options_, layout_);
  EXPECT_EQ(restored.progress[0]->step, 10);
  EXPECT_EQ(restored.state, first_);
  // The next save removes the leftover step-00000020.tmp.
  ASSERT_EQ(list_uncommitted(dir_.path()).size(), 1u);
  save_on(2, options_, layout_, second_, 30);
  EXPECT_TRUE(list_uncommitted(dir_.path()).empty());
  EXPECT_EQ(restore_on(2, options_, layout_).state, second_);
}

TEST_F(CheckpointCommit, AFailingRankFailsTheSaveOnEveryRank) {
  std::atomic<int> errors{0}, throws{0};
  options_.hooks.on_error = [&](const ErrorInfo& e) {
    EXPECT_NE(e.message.find("rank 2 cannot write"), std::string::npos) << e.message;
    ++errors;
  };
  options_.fault_hook = [](std::string_view point, int rank) {
    if (point == kPointShardWriting && rank == 2) throw FatalError("rank 2 cannot write");
  };
  const std::vector<ShardRange> ranges = uneven_ranges(layout_.total(), 3);
  run_ranks(3, [&](Group& group) {
    Saver saver(options_, layout_, group);
    try {
      saver.save(snapshot_of(first_, ranges[static_cast<std::size_t>(group.rank())], group.rank(), 10));
    } catch (const FatalError&) {
      ++throws;
    }
  });
  EXPECT_EQ(throws, 3);
  EXPECT_EQ(errors, 1);  // the rank that saw it
  EXPECT_TRUE(committed_steps(dir_.path()).empty());
}

TEST_F(CheckpointCommit, RejectsShardsThatDoNotFitTheLayout) {
  std::vector<float> short_buffer(5);
  ShardSnapshot shard = snapshot_of(first_, {0, layout_.total()}, 0, 10);
  shard.buffers[1] = short_buffer;
  SoloGroup group;
  Saver saver(options_, layout_, group);
  EXPECT_THROW(saver.save(shard), InvalidArgument);
  shard = snapshot_of(first_, {0, layout_.total()}, 0, 10);
  shard.range.end += 1;
  EXPECT_THROW(saver.save(shard), InvalidArgument);
  CheckpointOptions bad = options_;
  bad.keep = 0;
  EXPECT_THROW(Saver(bad, layout_, group), InvalidArgument);
  bad = options_;
  bad.checksum_block_bytes = 6;
  EXPECT_THROW(Saver(bad, layout_, group), InvalidArgument);
}

}  // namespace
}  // namespace hdp::checkpoint::test
