// Damaged checkpoints: a flipped byte, a truncated file, a missing file, a garbled manifest.
// verify names the file and the tensor; restore falls back to the previous committed checkpoint on
// every rank (even ranks that did not read the damaged bytes) and the error hook names the file.
#include <gtest/gtest.h>

#include <fstream>
#include <mutex>

#include "checkpoint/hdf5_file.h"
#include "checkpoint/manifest.h"
#include "checkpoint/verify.h"
#include "common/error.h"
#include "tests/checkpoint/checkpoint_fixture.h"
#include "tests/support/temp_dir.h"

namespace hdp::checkpoint::test {
namespace {
namespace fs = std::filesystem;

void flip_byte(const fs::path& file, std::uint64_t offset) {
  std::fstream stream(file, std::ios::in | std::ios::out | std::ios::binary);
  stream.seekg(static_cast<std::streamoff>(offset));
  char byte = 0;
  stream.get(byte);
  stream.seekp(static_cast<std::streamoff>(offset));
  stream.put(static_cast<char>(byte ^ 0x01));
}

class CheckpointCorruption : public ::testing::Test {
 protected:
  void SetUp() override {
    save_on(3, options_, layout_, older_, 10);
    save_on(3, options_, layout_, newer_, 20);
    options_.hooks.on_error = [this](const ErrorInfo& e) {
      std::lock_guard lock(mutex_);
      errors_.push_back(e);
    };
  }

  fs::path newest() const { return dir_.path() / "step-00000020"; }

  // Restores on 4 ranks and expects every rank to land on step 10 with the older state. Every
  // rank reports the skipped checkpoint; the primary reports (one per fault for a fault every
  // rank sees alike, else the ranks that read the damaged bytes) name `named`.
  enum class Seen { kByEveryRank, kByReaders };
  void expect_fallback(const std::string& named, Seen seen) {
    const Restored restored = restore_on(4, options_, layout_);
    for (const auto& progress : restored.progress) {
      ASSERT_TRUE(progress.has_value());
      EXPECT_EQ(progress->step, 10);
    }
    EXPECT_EQ(restored.state, older_);
    std::lock_guard lock(mutex_);
    ASSERT_EQ(errors_.size(), 4u);
    int primaries = 0;
    for (const ErrorInfo& e : errors_) {
      EXPECT_EQ(e.step, 20);
      EXPECT_EQ(e.operation, Operation::kRestore);
      if (!e.primary) continue;
      ++primaries;
      EXPECT_NE(e.message.find(named), std::string::npos) << e.message;
    }
    if (seen == Seen::kByEveryRank) {
      EXPECT_EQ(primaries, 1);
    } else {  // the flipped block lies in the range of one or two of the 4 new ranks
      EXPECT_GE(primaries, 1);
      EXPECT_LE(primaries, 2);
    }
  }

  hdp::test::TempDir dir_{"hdp-corrupt"};
  CheckpointOptions options_ = small_options(dir_.path());
  FlatLayout layout_ = tiny_llama_layout();
  FullState older_ = make_state(layout_, 1);
  FullState newer_ = make_state(layout_, 2);
  std::mutex mutex_;
  std::vector<ErrorInfo> errors_;  // guarded by mutex_
};

TEST_F(CheckpointCorruption, IntactCheckpointVerifies) {
  const VerifyReport report = verify_checkpoint(newest());
  EXPECT_TRUE(report.ok());
  // Every tensor byte of the three buffers plus the three RNG states was read and matched.
  EXPECT_EQ(report.bytes_checked, 3 * layout_.total() * sizeof(float) + rng_bytes(0, 20).size() + rng_bytes(1, 20).size() +
                                      rng_bytes(2, 20).size());
}

TEST_F(CheckpointCorruption, FlippedByteIsNamedAndRestoreFallsBack) {
  // A byte inside rank 1's first exp_avg piece: one checksum block, read by one or two of the new ranks.
  const Manifest manifest = read_manifest(newest());
  const TensorRecord* victim = nullptr;
  for (const TensorRecord& tensor : manifest.tensors) {
    if (!victim && tensor.pieces[1].front().file == 1) victim = &tensor;
  }
  ASSERT_NE(victim, nullptr);
  const std::string dataset = victim->pieces[1].front().dataset;
  const std::uint64_t offset = Hdf5File::open_read(newest() / "rank-00001.h5").raw_data_offset(dataset);
  flip_byte(newest() / "rank-00001.h5", offset + 5);

  const VerifyReport report = verify_checkpoint(newest());
  ASSERT_EQ(report.faults.size(), 1u);
  EXPECT_EQ(report.faults[0].file, "rank-00001.h5");
  EXPECT_EQ(report.faults[0].tensor, "exp_avg " + victim->name);
  EXPECT_NE(report.faults[0].message.find("checksum mismatch in block 0"), std::string::npos) << report.faults[0].message;
  expect_fallback("rank-00001.h5", Seen::kByReaders);
}

TEST_F(CheckpointCorruption, TruncatedFileIsNamedAndRestoreFallsBack) {
  const fs::path file = newest() / "rank-00002.h5";
  fs::resize_file(file, fs::file_size(file) / 2);
  const VerifyReport report = verify_checkpoint(newest());
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.faults[0].file, "rank-00002.h5");
  EXPECT_NE(report.faults[0].message.find("truncated"), std::string::npos) << report.faults[0].message;
  // The fault lists the tensors with a piece in that file, starting with the first.
  const Manifest manifest = read_manifest(newest());
  std::string first_in_file;
  for (const TensorRecord& tensor : manifest.tensors) {
    for (const PieceRecord& piece : tensor.pieces[0]) {
      if (first_in_file.empty() && piece.file == 2) first_in_file = tensor.name;
    }
  }
  EXPECT_EQ(report.faults[0].tensor.rfind(first_in_file, 0), 0u) << report.faults[0].tensor;
  expect_fallback("rank-00002.h5", Seen::kByEveryRank);
}

TEST_F(CheckpointCorruption, MissingFileIsNamedAndRestoreFallsBack) {
  fs::remove(newest() / "rank-00000.h5");
  const VerifyReport report = verify_checkpoint(newest());
  ASSERT_EQ(report.faults.size(), 1u);
  EXPECT_EQ(report.faults[0].file, "rank-00000.h5");
  EXPECT_EQ(report.faults[0].message, "missing");
  EXPECT_NE(report.faults[0].tensor.find("model.embed_tokens.weight"), std::string::npos) << report.faults[0].tensor;
  expect_fallback("rank-00000.h5", Seen::kByEveryRank);
}

TEST_F(CheckpointCorruption, GarbledManifestFallsBack) {
  std::ofstream(newest() / "manifest.json") << "{\"format\": \"hdp-checkpoint\", \"tens";
  const VerifyReport report = verify_checkpoint(newest());
  EXPECT_FALSE(report.manifest.has_value());
  ASSERT_EQ(report.faults.size(), 1u);
  EXPECT_EQ(report.faults[0].file, "manifest.json");
  expect_fallback("manifest.json", Seen::kByEveryRank);
}

TEST_F(CheckpointCorruption, EveryCheckpointFaultyIsAnError) {
  fs::remove(newest() / "rank-00000.h5");
  fs::remove(dir_.path() / "step-00000010" / "rank-00001.h5");
  EXPECT_THROW(restore_on(2, options_, layout_), FatalError);
}

}  // namespace
}  // namespace hdp::checkpoint::test
