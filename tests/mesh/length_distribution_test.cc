// The named length distributions reproduce ByteScale's published shares; batches are exact and
// reproducible; lengths files are read strictly.
#include <gtest/gtest.h>

#include <fstream>

#include "common/error.h"
#include "mesh/plan/length_distribution.h"
#include "tests/support/temp_dir.h"

namespace hdp::mesh {
namespace {

constexpr std::int64_t k2M = 2LL << 20;

struct Shares {
  double samples_at_most_4k = 0;
  double tokens_above_128k = 0;
  double tokens_above_256k = 0;
  double tokens_at_2m = 0;
};

Shares measure(const char* name, int samples) {
  const auto distribution = named_distribution(name);
  std::mt19937_64 rng(2024);
  double tokens = 0, above128 = 0, above256 = 0, at2m = 0, short_samples = 0;
  for (int i = 0; i < samples; ++i) {
    const double s = static_cast<double>(distribution.sample(rng, k2M));
    tokens += s;
    above128 += s > 131072 ? s : 0;
    above256 += s > 262144 ? s : 0;
    at2m += s == k2M ? s : 0;
    short_samples += s <= 4096 ? 1 : 0;
  }
  return {short_samples / samples, above128 / tokens, above256 / tokens, at2m / tokens};
}

// 1M samples. The scarcest event is byted's 2M point mass (p = 5e-4): ~500 draws, relative
// standard error ~4.5%, so ±1.5 points on a 12.1% share is over 2.5 sigma; the other shares are
// sums over thousands of samples and ±1.5 points is wider still.
constexpr int kSamples = 1'000'000;

TEST(LengthDistribution, BytedMatchesThePublishedShares) {
  const Shares shares = measure("byted", kSamples);
  EXPECT_NEAR(shares.samples_at_most_4k, 0.80, 0.02);
  EXPECT_NEAR(shares.tokens_above_128k, 0.443, 0.015);
  EXPECT_NEAR(shares.tokens_above_256k, 0.37, 0.015);
  EXPECT_NEAR(shares.tokens_at_2m, 0.121, 0.015);
}

TEST(LengthDistribution, GithubMatchesThePublishedShares) {
  const Shares shares = measure("github", kSamples);
  EXPECT_NEAR(shares.tokens_above_128k, 0.162, 0.015);
  EXPECT_NEAR(shares.tokens_above_256k, 0.098, 0.015);
}

TEST(LengthDistribution, LengthsAreCutAtTheContext) {
  const auto distribution = named_distribution("byted");
  const auto batch = draw_batch(distribution, 65536, 8 << 20, 1);
  std::int64_t total = 0, at_context = 0;
  for (std::int64_t s : batch) {
    EXPECT_GE(s, 1);
    EXPECT_LE(s, 65536);
    total += s;
    at_context += s == 65536 ? 1 : 0;
  }
  EXPECT_EQ(total, 8 << 20);
  EXPECT_GT(at_context, 0);  // byted has ~5% of samples above 64K
}

TEST(LengthDistribution, SameSeedSameBatchOtherSeedOtherBatch) {
  const auto distribution = named_distribution("github");
  EXPECT_EQ(draw_batch(distribution, k2M, 1 << 20, 7), draw_batch(distribution, k2M, 1 << 20, 7));
  EXPECT_NE(draw_batch(distribution, k2M, 1 << 20, 7), draw_batch(distribution, k2M, 1 << 20, 8));
  EXPECT_THROW(draw_batch(distribution, k2M, 0, 7), InvalidArgument);
  EXPECT_THROW(named_distribution("zipf"), InvalidArgument);
}

TEST(LengthDistribution, FileDistributionAndLengthsFiles) {
  test::TempDir dir;
  const std::string path = (dir.path() / "lengths.txt").string();
  std::ofstream(path) << "# lengths\n100 200\n\n300  # trailing comment\n0\n";
  EXPECT_EQ(read_lengths(path), (std::vector<std::int64_t>{100, 200, 300, 0}));
  const auto distribution = named_distribution("file:" + path);
  std::mt19937_64 rng(1);
  for (int i = 0; i < 100; ++i) {
    const std::int64_t s = distribution.sample(rng, 250);
    EXPECT_TRUE(s == 100 || s == 200 || s == 250) << s;  // 300 is cut at the context
  }
  std::ofstream(path) << "100\n12x\n";
  try {
    read_lengths(path);
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(read_lengths((dir.path() / "missing").string()), InvalidArgument);
}

}  // namespace
}  // namespace hdp::mesh
