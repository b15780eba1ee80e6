// Hdf5File's reads: element ranges come back exactly (also from several threads at once, which
// read outside HDF5's global lock), and a range outside the dataset or a dataset of another type
// is refused with a message naming it. A file of many small datasets and one larger than
// kWritebackBytes reads back exactly after close_durably (the hand-over to the disk is only a
// hint: this checks that gathering it changes nothing that is written).
#include <gtest/gtest.h>

#include <numeric>
#include <thread>

#include "checkpoint/hdf5_file.h"
#include "common/error.h"
#include "tests/support/temp_dir.h"

namespace hdp::checkpoint::test {
namespace {

class Hdf5FileRead : public ::testing::Test {
 protected:
  void SetUp() override {
    std::iota(values_.begin(), values_.end(), 0.5f);
    Hdf5File file = Hdf5File::create(path_);
    file.write_floats("/params/w", values_);
    file.write_bytes("/state/rng", std::vector<std::uint8_t>(16, 7));
    file.close_durably();
  }

  hdp::test::TempDir dir_{"hdp-h5file"};
  std::filesystem::path path_ = dir_.path() / "rank-00000.h5";
  std::vector<float> values_ = std::vector<float>(100000);
};

TEST_F(Hdf5FileRead, ThreadsReadTheirRangesExactly) {
  const Hdf5File file = Hdf5File::open_read(path_);
  constexpr int kThreads = 4;
  std::vector<std::vector<float>> out(kThreads, std::vector<float>(20000));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] { file.read_floats("/params/w", 3 + 24000 * t, out[static_cast<std::size_t>(t)]); });
  }
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    const auto begin = values_.begin() + 3 + 24000 * t;
    EXPECT_TRUE(std::equal(begin, begin + 20000, out[static_cast<std::size_t>(t)].begin())) << "thread " << t;
  }
}

TEST_F(Hdf5FileRead, RefusesRangesOutsideAndOtherTypes) {
  const Hdf5File file = Hdf5File::open_read(path_);
  std::vector<float> out(10);
  try {
    file.read_floats("/params/w", 99995, out);
    FAIL() << "read past the end of the dataset";
  } catch (const FatalError& e) {
    EXPECT_NE(std::string(e.what()).find("/params/w has no elements [99995, 100005)"), std::string::npos) << e.what();
  }
  try {
    file.read_floats("/state/rng", 0, std::span<float>(out).first(4));
    FAIL() << "read bytes as floats";
  } catch (const FatalError& e) {
    EXPECT_NE(std::string(e.what()).find("/state/rng is not float32"), std::string::npos) << e.what();
  }
  EXPECT_THROW(file.read_floats("/params/missing", 0, out), FatalError);
}

TEST(Hdf5FileWrite, ManySmallDatasetsAndALargeOneReadBackExactly) {
  hdp::test::TempDir dir("hdp-h5file");
  const std::filesystem::path path = dir.path() / "rank-00000.h5";
  // 300 datasets of 40 KiB (12 MiB: one hand-over of 8 MiB gathered, and what gathers after)
  // around one dataset larger than kWritebackBytes, handed over with what gathered before it.
  constexpr int kSmall = 300;
  constexpr std::size_t kSmallElements = 10240;
  const std::size_t large_elements = Hdf5File::kWritebackBytes / sizeof(float) + 1000;
  // Exact in float32 (below 2^24): each dataset's values differ from every other's.
  auto value = [](int dataset, std::size_t i) { return static_cast<float>(dataset * 16384 + static_cast<int>(i % 16384)); };
  {
    Hdf5File file = Hdf5File::create(path);
    std::vector<float> data(kSmallElements);
    for (int d = 0; d < kSmall; ++d) {
      if (d == kSmall / 2) {
        std::vector<float> large(large_elements);
        for (std::size_t i = 0; i < large.size(); ++i) large[i] = value(-1, i);
        file.write_floats("/large", large);
      }
      for (std::size_t i = 0; i < data.size(); ++i) data[i] = value(d, i);
      file.write_floats("/small/" + std::to_string(d), data);
    }
    file.close_durably();
  }
  const Hdf5File file = Hdf5File::open_read(path);
  std::vector<float> out(kSmallElements);
  for (int d = 0; d < kSmall; ++d) {
    file.read_floats("/small/" + std::to_string(d), 0, out);
    for (std::size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], value(d, i)) << "dataset " << d << " element " << i;
  }
  std::vector<float> large(large_elements);
  file.read_floats("/large", 0, large);
  for (std::size_t i = 0; i < large.size(); ++i) ASSERT_EQ(large[i], value(-1, i)) << "element " << i;
}

}  // namespace
}  // namespace hdp::checkpoint::test
