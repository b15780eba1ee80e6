// `hdp ckpt list|verify|inspect` on checkpoints written by the library: output, exit codes, and
// faults named by file and tensor.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include <nlohmann/json.hpp>

#include "checkpoint/hdf5_file.h"
#include "checkpoint/manifest.h"
#include "tests/checkpoint/checkpoint_fixture.h"
#include "tests/support/child_process.h"
#include "tests/support/temp_dir.h"

namespace hdp::checkpoint::test {
namespace {
namespace fs = std::filesystem;

hdp::test::CommandResult hdp(std::vector<std::string> args) {
  const char* dir = std::getenv("HDP_BIN_DIR");
  args.insert(args.begin(), std::string(dir ? dir : "build/bin") + "/hdp");
  return hdp::test::run_command(args, {}, std::chrono::seconds(30));
}

class CkptCli : public ::testing::Test {
 protected:
  void SetUp() override {
    save_on(2, small_options(dir_.path()), layout_, make_state(layout_, 1), 10);
    save_on(2, small_options(dir_.path()), layout_, make_state(layout_, 2), 20);
  }
  fs::path newest() const { return dir_.path() / "step-00000020"; }

  hdp::test::TempDir dir_{"hdp-ckpt-cli"};
  FlatLayout layout_ = tiny_llama_layout();
};

TEST_F(CkptCli, ListShowsCommittedLatestAndIncomplete) {
  fs::create_directory(dir_.path() / "step-00000030.tmp");
  const auto r = hdp({"ckpt", "list", dir_.path().string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("step-00000010\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("step-00000020  (latest)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("incomplete (never restored): " + (dir_.path() / "step-00000030.tmp").string()), std::string::npos)
      << r.out;
  const auto j = hdp({"ckpt", "list", "--json", dir_.path().string()});
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const auto listed = nlohmann::json::parse(j.out);
  ASSERT_EQ(listed["checkpoints"].size(), 2u);
  EXPECT_EQ(listed["checkpoints"][1]["step"], 20);
  EXPECT_EQ(listed["checkpoints"][1]["latest"], true);
  EXPECT_EQ(listed["checkpoints"][0]["world_size"], 2);
  EXPECT_EQ(listed["incomplete"].size(), 1u);
}

TEST_F(CkptCli, VerifyPassesThenNamesAFlippedByteByFileAndTensor) {
  const auto ok = hdp({"ckpt", "verify", newest().string()});
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.out.find("ok: "), std::string::npos) << ok.out;

  const Manifest manifest = read_manifest(newest());
  const TensorRecord& tensor = manifest.tensors.back();  // lm_head.weight, in rank 1's file
  const PieceRecord& piece = tensor.pieces[0].back();
  ASSERT_EQ(piece.file, 1u);
  const std::uint64_t offset = Hdf5File::open_read(newest() / "rank-00001.h5").raw_data_offset(piece.dataset);
  {
    std::fstream file(newest() / "rank-00001.h5", std::ios::in | std::ios::out | std::ios::binary);
    file.seekg(static_cast<std::streamoff>(offset + 10));
    const int byte = file.get();
    file.seekp(static_cast<std::streamoff>(offset + 10));
    file.put(static_cast<char>(byte ^ 0xff));
  }
  const auto bad = hdp({"ckpt", "verify", newest().string()});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("fault: rank-00001.h5: params lm_head.weight: "), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("checksum mismatch"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("hdp: error: checkpoint " + newest().string() + " has 1 fault(s)"), std::string::npos) << bad.err;
}

TEST_F(CkptCli, VerifyNamesAMissingFile) {
  fs::remove(newest() / "rank-00000.h5");
  const auto r = hdp({"ckpt", "verify", newest().string()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("fault: rank-00000.h5: model.embed_tokens.weight"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(": missing"), std::string::npos) << r.err;
}

TEST_F(CkptCli, InspectPrintsStepWorldSizeAndShapes) {
  const auto r = hdp({"ckpt", "inspect", newest().string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* text : {"step: 20\n", "world_size: 2\n", "  model.layers.1.mlp.down_proj.weight  [16, 43]",
                           "  rank-00001.h5  shard ["}) {
    EXPECT_NE(r.out.find(text), std::string::npos) << text << " missing from\n" << r.out;
  }
  const auto j = hdp({"ckpt", "inspect", "--json", newest().string()});
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const auto info = nlohmann::json::parse(j.out);
  EXPECT_EQ(info["step"], 20);
  EXPECT_EQ(info["tensors"].size(), layout_.tensors().size());
  EXPECT_EQ(info["tensors"][0]["shape"], nlohmann::json({37, 16}));
}

TEST_F(CkptCli, BadUsageExitsTwoWithOneLine) {
  const auto none = hdp({"ckpt"});
  EXPECT_EQ(none.exit_code, 2) << none.err;
  const auto missing = hdp({"ckpt", "verify", (dir_.path() / "nosuch").string()});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_EQ(std::count(missing.err.begin(), missing.err.end(), '\n'), 1) << missing.err;
  EXPECT_NE(missing.err.find("nosuch"), std::string::npos) << missing.err;
}

}  // namespace
}  // namespace hdp::checkpoint::test
