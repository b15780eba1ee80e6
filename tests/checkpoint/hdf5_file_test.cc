// Hdf5File's reads: element ranges come back exactly (also from several threads at once, which
// read outside HDF5's global lock), and a range outside the dataset or a dataset of another type
// is refused with a message naming it.
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

}  // namespace
}  // namespace hdp::checkpoint::test
