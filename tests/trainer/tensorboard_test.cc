// TensorBoard event files read back by an independent reader (tests/trainer/read_tensorboard.py:
// Debian's python3 with python3-crc32c for the framing and protoc-generated Python code for the
// Events), never by hdp's own code:
//   - the writer's scalars come back exactly (as float32), with the file version first and every
//     CRC right; CRC32C itself against the standard check value;
//   - a torn last record (a crash mid-write) is reported and the records before it read;
//   - a real job (`hdp run`, 2 workers, the tiny model, 8 steps): rank 0's scalars equal what it
//     wrote to its metrics file, step by step (loss, lr, tokens/s, world size, step time, grad norm).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "tests/support/child_process.h"
#include "tests/support/temp_dir.h"
#include "trainer/tensorboard.h"

namespace hdp::trainer {
namespace {

namespace fs = std::filesystem;

struct Read {
  std::vector<nlohmann::json> scalars;
  std::vector<nlohmann::json> files;
  std::string error;
};

Read read_back(const std::vector<fs::path>& files) {
  std::vector<std::string> argv = {"/usr/bin/python3", std::string(HDP_SOURCE_DIR) + "/tests/trainer/read_tensorboard.py",
                                   HDP_SOURCE_DIR};
  for (const auto& f : files) argv.push_back(f.string());
  const auto result = test::run_command(argv);
  Read read;
  if (result.exit_code != 0) {
    read.error = "reader exit " + std::to_string(result.exit_code) + ": " + result.err;
    return read;
  }
  std::istringstream lines(result.out);
  for (std::string line; std::getline(lines, line);) {
    auto j = nlohmann::json::parse(line);
    (j.contains("records") ? read.files : read.scalars).push_back(std::move(j));
  }
  return read;
}

std::vector<fs::path> event_files(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

TEST(TensorBoard, MaskedCrc32cOfTheStandardCheckString) {
  const std::uint32_t crc = 0xE3069283;  // CRC32C("123456789")
  const std::uint32_t masked = ((crc >> 15) | (crc << 17)) + 0xa282ead8U;
  EXPECT_EQ(masked_crc32c("123456789", 9), masked);
}

TEST(TensorBoard, AnIndependentReaderGetsEveryScalarBackExactly) {
  test::TempDir dir;
  fs::path path;
  {
    TensorBoardWriter writer(dir.path() / "tb");
    path = writer.path();
    for (std::int64_t step = 1; step <= 5; ++step) {
      writer.scalars(step, {{"train/loss", 5.0 / static_cast<double>(step)}, {"train/world_size", 4}});
    }
    writer.scalars(6, {{"train/lr", 3e-4}, {"train/tokens_per_s", 123456.789}});
  }
  EXPECT_EQ(path.filename().string().rfind("events.out.tfevents.", 0), 0u);
  const Read read = read_back({path});
  ASSERT_TRUE(read.error.empty()) << read.error;
  ASSERT_EQ(read.files.size(), 1u);
  EXPECT_EQ(read.files[0]["records"], 7);  // the file version, then one event per call
  EXPECT_EQ(read.files[0]["file_version"], "brain.Event:2");
  EXPECT_FALSE(read.files[0]["torn_tail"].get<bool>());
  ASSERT_EQ(read.scalars.size(), 12u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(read.scalars[2 * i]["step"], i + 1);
    EXPECT_EQ(read.scalars[2 * i]["tag"], "train/loss");
    EXPECT_EQ(read.scalars[2 * i]["value"].get<double>(), static_cast<double>(static_cast<float>(5.0 / (i + 1))));
    EXPECT_EQ(read.scalars[2 * i + 1]["value"].get<double>(), 4.0);
  }
  EXPECT_EQ(read.scalars[11]["tag"], "train/tokens_per_s");
  EXPECT_EQ(read.scalars[11]["value"].get<double>(), static_cast<double>(static_cast<float>(123456.789)));
}

TEST(TensorBoard, ATornLastRecordIsReportedAndTheOthersRead) {
  test::TempDir dir;
  fs::path path;
  {
    TensorBoardWriter writer(dir.path());
    path = writer.path();
    writer.scalars(1, {{"train/loss", 1.5}});
    writer.scalars(2, {{"train/loss", 1.25}});
  }
  fs::resize_file(path, fs::file_size(path) - 3);
  const Read read = read_back({path});
  ASSERT_TRUE(read.error.empty()) << read.error;
  EXPECT_TRUE(read.files[0]["torn_tail"].get<bool>());
  ASSERT_EQ(read.scalars.size(), 1u);
  EXPECT_EQ(read.scalars[0]["value"].get<double>(), 1.5);
}

TEST(TensorBoard, ACorruptRecordIsAnErrorOfTheReader) {
  test::TempDir dir;
  fs::path path;
  {
    TensorBoardWriter writer(dir.path());
    path = writer.path();
    writer.scalars(1, {{"train/loss", 1.5}});
  }
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(path)) - 6);
    f.put('\x7f');
  }
  EXPECT_FALSE(read_back({path}).error.empty()) << "the reader must check the CRCs";
}

TEST(TensorBoard, AnUnwritableDirectoryIsAClearError) {
  test::TempDir dir;
  std::ofstream(dir.path() / "file") << "x";
  try {
    TensorBoardWriter writer(dir.path() / "file" / "tb");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("file/tb"), std::string::npos) << e.what();
  }
}

TEST(TensorBoard, ATrainingJobsScalarsEqualItsMetricsFile) {
  test::TempDir dir;
  const std::string hdp = std::string(std::getenv("HDP_BIN_DIR")) + "/hdp";
  const auto result = test::run_command(
      {hdp, "run", "--nodes", "1", "--nproc-per-node", "2", "--run-dir", (dir.path() / "runs").string(), "--", hdp,
       "train", "--model", "tiny", "--steps", "8", "--context", "128", "--capacity", "128", "--batch-tokens", "1024",
       "--data", "synthetic:github", "--threads", "1", "--metrics-file", (dir.path() / "metrics.jsonl").string(),
       "--tensorboard-dir", (dir.path() / "tb").string()},
      {}, std::chrono::seconds(120));
  ASSERT_EQ(result.exit_code, 0) << result.out << result.err;
  const Read read = read_back(event_files(dir.path() / "tb"));
  ASSERT_TRUE(read.error.empty()) << read.error;
  std::map<std::pair<std::int64_t, std::string>, double> scalars;
  for (const auto& s : read.scalars) scalars[{s["step"].get<std::int64_t>(), s["tag"].get<std::string>()}] = s["value"];
  std::ifstream metrics(dir.path() / "metrics.jsonl");
  int steps = 0;
  const std::map<std::string, std::string> tags = {{"loss", "train/loss"},         {"lr", "train/lr"},
                                                   {"tokens_per_s", "train/tokens_per_s"},
                                                   {"world_size", "train/world_size"},
                                                   {"step_ms", "train/step_ms"},   {"grad_norm", "train/grad_norm"}};
  for (std::string line; std::getline(metrics, line);) {
    const auto m = nlohmann::json::parse(line);
    const std::int64_t step = m["step"];
    for (const auto& [field, tag] : tags) {
      auto it = scalars.find({step, tag});
      ASSERT_NE(it, scalars.end()) << "no " << tag << " at step " << step;
      EXPECT_EQ(it->second, static_cast<double>(static_cast<float>(m[field].get<double>()))) << tag << " at step " << step;
    }
    ++steps;
  }
  EXPECT_EQ(steps, 8);
  EXPECT_EQ(scalars.size(), 8u * tags.size());
}

}  // namespace
}  // namespace hdp::trainer
