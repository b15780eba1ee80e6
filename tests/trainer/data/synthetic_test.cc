// Tests of trainer/data/synthetic.h: the same options give the same documents (lengths and
// tokens) and the same batches; the lengths follow the named distribution; tokens stay in the
// vocabulary and spread over it; bad options are refused with the value named.
#include "trainer/data/synthetic.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/error.h"
#include "mesh/plan/length_distribution.h"
#include "tests/support/temp_dir.h"
#include "trainer/data/batch_source.h"

namespace hdp::trainer::data {
namespace {

using ::testing::HasSubstr;

std::vector<std::int32_t> tokens_of(const SyntheticDocuments& docs, std::uint64_t d) {
  std::vector<std::int32_t> tokens;
  std::string why;
  EXPECT_TRUE(docs.read(d, docs.piece_length(d), tokens, why));
  return tokens;
}

double mean_length(const SyntheticDocuments& docs) {
  double sum = 0;
  for (std::uint64_t d = 0; d < docs.piece_count(); ++d) sum += static_cast<double>(docs.piece_length(d));
  return sum / static_cast<double>(docs.piece_count());
}

// The distribution's own mean at `context`, over `draws` draws from a seed the documents do not use.
double distribution_mean(const std::string& spec, std::int64_t context, int draws) {
  const mesh::LengthDistribution distribution = mesh::named_distribution(spec);
  std::mt19937_64 rng(0xfeedULL);
  double sum = 0;
  for (int i = 0; i < draws; ++i) sum += static_cast<double>(distribution.sample(rng, context));
  return sum / draws;
}

TEST(SyntheticData, SameOptionsGiveTheSameDocumentsAndBatches) {
  const SyntheticOptions options{.distribution = "byted", .seed = 77, .documents = 2000, .context = 8192};
  const auto a = std::make_shared<const SyntheticDocuments>(options);
  const auto b = std::make_shared<const SyntheticDocuments>(options);
  ASSERT_EQ(a->piece_count(), 2000u);
  for (std::uint64_t d = 0; d < 2000; d += 7) {
    ASSERT_EQ(a->piece_length(d), b->piece_length(d)) << d;
    ASSERT_GE(a->piece_length(d), 1);
    ASSERT_LE(a->piece_length(d), 8192);
    EXPECT_EQ(tokens_of(*a, d), tokens_of(*b, d)) << d;
  }
  // A prefix read is the prefix of the whole.
  std::vector<std::int32_t> prefix;
  std::string why;
  ASSERT_TRUE(a->read(3, 1, prefix, why));
  EXPECT_EQ(prefix[0], tokens_of(*a, 3)[0]);
  EXPECT_EQ(prefix[0], SyntheticDocuments::token(77, 3, 0, 256));

  BatchSource first(a, 5), second(b, 5);
  checkpoint::DataPosition pa, pb;
  for (int step = 0; step < 100; ++step) {
    const GlobalBatch x = first.next(pa, 65536);
    const GlobalBatch y = second.next(pb, 65536);
    ASSERT_EQ(x.sequences, y.sequences) << step;
    ASSERT_EQ(x.tokens, 65536);
  }
  EXPECT_EQ(pa, pb);
  EXPECT_GE(pa.epoch, 1u);

  // Another seed: other lengths and other tokens.
  SyntheticOptions other = options;
  other.seed = 78;
  const SyntheticDocuments c(other);
  int same_length = 0;
  for (std::uint64_t d = 0; d < 2000; ++d) same_length += c.piece_length(d) == a->piece_length(d);
  EXPECT_LT(same_length, 100);
  EXPECT_NE(SyntheticDocuments::token(77, 0, 0, 1 << 30), SyntheticDocuments::token(78, 0, 0, 1 << 30));
}

TEST(SyntheticData, LengthsFollowTheDistribution) {
  // 200000 documents against 10^6 draws of the distribution itself, from another seed. Tolerance
  // 2% of the mean: at these contexts the standard error of the difference is below 0.5%.
  for (const auto& [spec, context] : std::vector<std::pair<std::string, std::int64_t>>{
           {"github", 4096}, {"github", 32768}, {"byted", 4096}, {"byted", 32768}}) {
    const SyntheticDocuments docs({.distribution = spec, .seed = 1, .documents = 200000, .context = context});
    const double got = mean_length(docs);
    const double want = distribution_mean(spec, context, 1000000);
    std::printf("%s at context %lld: synthetic mean %.1f, distribution mean %.1f\n", spec.c_str(),
                static_cast<long long>(context), got, want);
    EXPECT_NEAR(got, want, 0.02 * want) << spec << " " << context;
  }
  // An empirical distribution: only its lengths, in their proportions (1:2:1).
  hdp::test::TempDir dir("hdp-data");
  const std::string path = (dir.path() / "lengths.txt").string();
  std::ofstream(path) << "# lengths\n5 10 10 20\n";
  const SyntheticDocuments docs({.distribution = "file:" + path, .seed = 2, .documents = 40000, .context = 15});
  std::vector<int> seen(16, 0);
  for (std::uint64_t d = 0; d < docs.piece_count(); ++d) ++seen.at(static_cast<std::size_t>(docs.piece_length(d)));
  EXPECT_EQ(seen[5] + seen[10] + seen[15], 40000);  // 20 is cut at the context, 15
  EXPECT_NEAR(seen[10] / 40000.0, 0.5, 0.02);
  EXPECT_NEAR(seen[5] / 40000.0, 0.25, 0.02);
}

TEST(SyntheticData, TokensStayInTheVocabularyAndSpreadOverIt) {
  std::vector<int> counts(256, 0);
  for (std::uint64_t d = 0; d < 100; ++d) {
    for (std::uint64_t j = 0; j < 2560; ++j) {
      ++counts[static_cast<std::size_t>(SyntheticDocuments::token(9, d, j, 256))];
    }
  }
  double chi2 = 0;  // 256000 tokens, 1000 expected per value; 255 degrees of freedom (sd 22.6)
  for (int c : counts) chi2 += (c - 1000.0) * (c - 1000.0) / 1000.0;
  EXPECT_LT(chi2, 350.0);
  for (std::uint64_t j = 0; j < 1000; ++j) {
    EXPECT_EQ(SyntheticDocuments::token(9, 1, j, 1), 0);
    const std::int32_t t = SyntheticDocuments::token(9, 1, j, 128256);
    EXPECT_GE(t, 0);
    EXPECT_LT(t, 128256);
  }
  // Pinned: benchmarks compare runs across versions.
  const auto token = &SyntheticDocuments::token;
  EXPECT_THAT((std::vector<std::int32_t>{token(0, 0, 0, 256), token(0, 0, 1, 256), token(0, 1, 0, 256),
                                         token(1, 0, 0, 256)}),
              ::testing::ElementsAre(35, 248, 177, 68));
}

TEST(SyntheticData, RejectsBadOptions) {
  auto message = [](const SyntheticOptions& options) {
    try {
      SyntheticDocuments docs(options);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_THAT(message({.context = 0}), HasSubstr("context length must be >= 1, got 0"));
  EXPECT_THAT(message({.documents = 0, .context = 8}), HasSubstr("got 0"));
  EXPECT_THAT(message({.context = 8, .vocab = 0}), HasSubstr("vocabulary size must be >= 1, got 0"));
  EXPECT_THAT(message({.distribution = "zipf", .context = 8}), HasSubstr("unknown length distribution 'zipf'"));
  EXPECT_THAT(message({.distribution = "file:/nonexistent/lengths", .context = 8}), HasSubstr("/nonexistent/lengths"));
}

}  // namespace
}  // namespace hdp::trainer::data
