// Tests of trainer/data/blend.h: weighted blends of datasets (`--data "0.7 A 0.3 B"`).
//  - K is the fewest virtual pieces that read every member's pieces once; each member's share of
//    them is w * K within one piece; every member piece is used, repeats balanced (each pass over
//    an upsampled member a permutation); any prefix of k holds the weights within 2 pieces;
//  - through the batch source, a blend of two keeps 0.7/0.3 and 0.9/0.1 within 2% over 10,000
//    samples (the fractions are printed);
//  - equal inputs give equal pieces, tokens and fingerprints; a weight, a member, the order or the
//    seed changed changes the fingerprint; weights are normalised (1 1 is 0.5 0.5);
//  - a run resumed from a saved position, with the blend and the batch source built anew, takes the
//    same pieces in the same order as the uninterrupted run, across epochs;
//  - a member's refusal names its label; reads from several threads agree; the limits are refused
//    naming the member and its figures;
//  - --data parsing: every bad form is an InvalidArgument naming the token and its item; open_data
//    builds a blend and names a missing path; TrainerConfig::validate checks a blend's form and
//    takes blends in its vocabulary check (a text directory in a blend needs 256, the others not).
#include "trainer/data/blend.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/error.h"
#include "tests/support/temp_dir.h"
#include "trainer/data/batch_source.h"
#include "trainer/data/synthetic.h"
#include "trainer/trainer_config.h"
#include "trainer/training_setup.h"

namespace hdp::trainer::data {
namespace {

using checkpoint::DataPosition;
using ::testing::HasSubstr;

// `count` pieces held in no memory: piece p has 1 + p % 5 tokens, token i of it is
// tag * 1'000'000 + p * 10 + i; the pieces in `refused` are refused.
class Counted final : public PieceSource {
 public:
  Counted(std::uint64_t count, std::int32_t tag, std::set<std::uint64_t> refused = {})
      : count_(count), tag_(tag), refused_(std::move(refused)) {}
  std::uint64_t piece_count() const override { return count_; }
  std::int64_t piece_length(std::uint64_t piece) const override { return 1 + static_cast<std::int64_t>(piece % 5); }
  bool read(std::uint64_t piece, std::int64_t length, std::vector<std::int32_t>& tokens,
            std::string& why) const override {
    if (refused_.contains(piece)) {
      why = "piece " + std::to_string(piece) + ": binary";
      return false;
    }
    tokens.resize(static_cast<std::size_t>(length));
    for (std::int64_t i = 0; i < length; ++i) {
      tokens[static_cast<std::size_t>(i)] = tag_ * 1'000'000 + static_cast<std::int32_t>(piece * 10 + i);
    }
    return true;
  }
  std::string fingerprint() const override {
    return fingerprint_of("counted " + std::to_string(count_) + " " + std::to_string(tag_));
  }

 private:
  std::uint64_t count_;
  std::int32_t tag_;
  std::set<std::uint64_t> refused_;
};

std::shared_ptr<const PieceSource> synthetic(std::uint64_t documents, std::uint64_t seed,
                                             const std::string& distribution = "github") {
  return std::make_shared<const SyntheticDocuments>(SyntheticOptions{
      .distribution = distribution, .seed = seed, .documents = documents, .context = 64, .vocab = 1000});
}

std::shared_ptr<const BlendedPieces> blend(std::vector<std::pair<double, std::shared_ptr<const PieceSource>>> members,
                                           std::uint64_t seed = 7) {
  std::vector<BlendMember> list;
  for (std::size_t d = 0; d < members.size(); ++d) {
    list.push_back({.weight = members[d].first, .source = members[d].second, .label = "m" + std::to_string(d)});
  }
  return std::make_shared<const BlendedPieces>(std::move(list), seed);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

TEST(BlendedPieces, KReadsEveryMemberOnceAndEachShareIsItsWeightSpreadThroughK) {
  struct Case {
    std::vector<double> weights;
    std::vector<std::uint64_t> sizes;
    std::uint64_t k;  // max ceil(n_d / w_d)
  };
  const std::vector<Case> cases = {
      {{0.5, 0.5}, {10, 3}, 20},           {{1, 3}, {4, 4}, 16},
      {{0.7, 0.3}, {700, 100}, 1000},      {{1, 2, 3.5}, {100, 37, 1}, 650},
      {{0.5, 0.5}, {10'000, 7}, 20'000},   {{0.9, 0.1}, {5000, 2000}, 20'000},
      {{0.2, 0.3, 0.5}, {1, 1, 1}, 5},     {{1}, {42}, 42},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("case K " + std::to_string(c.k));
    std::vector<std::pair<double, std::shared_ptr<const PieceSource>>> members;
    for (std::size_t d = 0; d < c.sizes.size(); ++d) {
      members.emplace_back(c.weights[d], std::make_shared<const Counted>(c.sizes[d], static_cast<std::int32_t>(d)));
    }
    const auto b = blend(members);
    ASSERT_EQ(b->piece_count(), c.k);
    const std::size_t n = c.sizes.size();
    double sum = 0;
    for (double w : c.weights) sum += w;
    // The fewest: K - 1 would leave some member a piece short.
    bool short_at_k_minus_1 = false;
    for (std::size_t d = 0; d < n; ++d) {
      short_at_k_minus_1 |= (c.weights[d] / sum) * double(c.k - 1) < double(c.sizes[d]);
    }
    EXPECT_TRUE(short_at_k_minus_1);

    std::vector<std::uint64_t> slots(n, 0);
    std::vector<std::map<std::uint64_t, std::uint64_t>> uses(n);
    std::vector<std::vector<std::uint64_t>> sequence(n);  // member pieces in slot order
    double worst_window = 0;
    for (std::uint64_t k = 0; k < b->piece_count(); ++k) {
      const std::size_t d = b->member_of(k);
      ASSERT_LT(d, n);
      const std::uint64_t j = b->member_piece(k);
      ASSERT_LT(j, c.sizes[d]);
      ASSERT_EQ(b->piece_length(k), 1 + static_cast<std::int64_t>(j % 5));
      // Not upsampled: slot i reads piece i (the slot index from the block counts equals a plain count).
      if (b->member_pieces(d) == c.sizes[d]) {
        ASSERT_EQ(j, slots[d]) << "k " << k;
      }
      ++slots[d];
      ++uses[d][j];
      sequence[d].push_back(j);
      for (std::size_t e = 0; e < n; ++e) {
        worst_window = std::max(worst_window, std::abs(double(slots[e]) - b->weight(e) * double(k + 1)));
      }
    }
    for (std::size_t d = 0; d < n; ++d) {
      EXPECT_DOUBLE_EQ(b->weight(d), c.weights[d] / sum);
      EXPECT_EQ(slots[d], b->member_pieces(d)) << d;
      // The share is w * K within one piece (largest remainder).
      EXPECT_LT(std::abs(double(slots[d]) - b->weight(d) * double(c.k)), 1.0) << d;
      // Every piece used; repeats differ by one at most; each whole pass over the member is a permutation.
      ASSERT_EQ(uses[d].size(), c.sizes[d]) << d;
      std::uint64_t lo = ~std::uint64_t{0}, hi = 0;
      for (const auto& [piece, count] : uses[d]) lo = std::min(lo, count), hi = std::max(hi, count);
      EXPECT_LE(hi - lo, 1u) << d;
      for (std::uint64_t at = 0; at + c.sizes[d] <= sequence[d].size(); at += c.sizes[d]) {
        std::set<std::uint64_t> pass(sequence[d].begin() + static_cast<std::ptrdiff_t>(at),
                                     sequence[d].begin() + static_cast<std::ptrdiff_t>(at + c.sizes[d]));
        EXPECT_EQ(pass.size(), c.sizes[d]) << "member " << d << " pass from slot " << at;
      }
    }
    // Any prefix of k holds each member within 2 pieces of its weight: spread, not in runs.
    EXPECT_LE(worst_window, 2.0);
  }
}

// The fractions of each member among the first `samples` pieces a batch source takes from the blend.
std::vector<double> drawn_fractions(const std::shared_ptr<const BlendedPieces>& b, std::uint64_t samples) {
  BatchSource source(b, 1234);
  DataPosition position;
  std::vector<double> counts(b->member_count(), 0);
  std::uint64_t taken = 0;
  while (taken < samples) {
    const GlobalBatch batch = source.next(position, 4096);
    for (std::uint64_t k : batch.pieces) {
      if (taken == samples) break;
      counts[b->member_of(k)] += 1;
      ++taken;
    }
  }
  for (double& c : counts) c /= static_cast<double>(samples);
  return counts;
}

TEST(BlendedPieces, ABlendOfTwoKeepsItsWeightsWithin2PercentOver10000Samples) {
  for (const auto& [wa, wb] : {std::pair{0.7, 0.3}, std::pair{0.9, 0.1}}) {
    // 5000 and 2000 documents: K = 7143 at 0.7/0.3 (1.4 epochs drawn), 20000 at 0.9/0.1 (half an
    // epoch: the fractions are a sample, not the exact counts of whole epochs).
    const auto b = blend({{wa, synthetic(5000, 1)}, {wb, synthetic(2000, 2, "byted")}});
    const std::vector<double> f = drawn_fractions(b, 10'000);
    std::printf("blend %.1f/%.1f: K %llu, fractions over 10000 samples %.4f / %.4f\n", wa, wb,
                static_cast<unsigned long long>(b->piece_count()), f[0], f[1]);
    EXPECT_NEAR(f[0], wa, 0.02);
    EXPECT_NEAR(f[1], wb, 0.02);
  }
}

TEST(BlendedPieces, EqualInputsGiveEqualPiecesAndAnyChangeChangesTheFingerprint) {
  const auto a = blend({{0.7, synthetic(300, 1)}, {0.3, synthetic(200, 2, "byted")}});
  const auto b = blend({{0.7, synthetic(300, 1)}, {0.3, synthetic(200, 2, "byted")}});
  ASSERT_EQ(a->piece_count(), b->piece_count());
  EXPECT_EQ(a->piece_count(), 667u);  // ceil(200 / 0.3)
  std::vector<std::int32_t> ta, tb;
  std::string why;
  for (std::uint64_t k = 0; k < a->piece_count(); ++k) {
    ASSERT_EQ(a->member_of(k), b->member_of(k));
    ASSERT_EQ(a->member_piece(k), b->member_piece(k));
    ASSERT_EQ(a->piece_length(k), b->piece_length(k));
    ASSERT_TRUE(a->read(k, a->piece_length(k), ta, why)) << why;
    ASSERT_TRUE(b->read(k, b->piece_length(k), tb, why)) << why;
    ASSERT_EQ(ta, tb) << "piece " << k;
  }
  EXPECT_EQ(a->fingerprint(), b->fingerprint());
  EXPECT_EQ(a->fingerprint().size(), 16u);
  // Normalised: 1 and 1 is 0.5 and 0.5.
  EXPECT_EQ(blend({{1, synthetic(300, 1)}, {1, synthetic(200, 2)}})->fingerprint(),
            blend({{0.5, synthetic(300, 1)}, {0.5, synthetic(200, 2)}})->fingerprint());
  const std::set<std::string> fingerprints = {
      a->fingerprint(),
      blend({{0.6, synthetic(300, 1)}, {0.4, synthetic(200, 2, "byted")}})->fingerprint(),      // a weight
      blend({{0.7, synthetic(300, 1)}, {0.3, synthetic(201, 2, "byted")}})->fingerprint(),      // a member
      blend({{0.3, synthetic(200, 2, "byted")}, {0.7, synthetic(300, 1)}})->fingerprint(),      // the order
      blend({{0.7, synthetic(300, 1)}, {0.3, synthetic(200, 2, "byted")}}, 8)->fingerprint(),  // the seed
      synthetic(300, 1)->fingerprint(),
  };
  EXPECT_EQ(fingerprints.size(), 6u);
  // The seed moves the repeats of the upsampled member, nothing else.
  const auto c = blend({{0.7, synthetic(300, 1)}, {0.3, synthetic(200, 2, "byted")}}, 8);
  bool moved = false;
  for (std::uint64_t k = 0; k < a->piece_count(); ++k) {
    ASSERT_EQ(a->member_of(k), c->member_of(k));
    moved |= a->member_piece(k) != c->member_piece(k);
  }
  EXPECT_TRUE(moved);
}

TEST(BlendedPieces, AResumedRunTakesTheSamePiecesAsTheUninterruptedOne) {
  const auto make = [] { return blend({{0.7, synthetic(300, 3)}, {0.3, synthetic(100, 4, "byted")}}, 99); };
  constexpr int kSteps = 30, kSplit = 11;
  const auto budget = [](int step) { return std::int64_t{700} + (step * 211) % 900; };
  const DataPosition start{2, 17};
  // One go.
  std::vector<GlobalBatch> whole;
  DataPosition at = start;
  {
    BatchSource source(make(), 99);
    for (int s = 0; s < kSteps; ++s) whole.push_back(source.next(at, budget(s)));
  }
  // Two runs, the second from the saved position with everything built anew.
  std::vector<GlobalBatch> split;
  DataPosition saved = start;
  {
    BatchSource source(make(), 99);
    for (int s = 0; s < kSplit; ++s) split.push_back(source.next(saved, budget(s)));
  }
  {
    BatchSource source(make(), 99);
    for (int s = kSplit; s < kSteps; ++s) split.push_back(source.next(saved, budget(s)));
  }
  EXPECT_EQ(saved, at);
  EXPECT_GT(at.epoch, start.epoch);  // the run crossed an epoch (K = 429)
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_EQ(whole[s].pieces, split[s].pieces) << "step " << s;
    EXPECT_EQ(whole[s].sequences, split[s].sequences) << "step " << s;
    EXPECT_EQ(whole[s].tokens, budget(s));
  }
}

TEST(BlendedPieces, ARefusalNamesItsMemberAndReadsFromSeveralThreadsAgree) {
  std::vector<BlendMember> members;
  members.push_back({.weight = 0.5, .source = std::make_shared<const Counted>(50, 1), .label = "/data/a"});
  members.push_back({.weight = 0.5, .source = std::make_shared<const Counted>(20, 2, std::set<std::uint64_t>{3}),
                     .label = "/data/b"});
  const BlendedPieces b(std::move(members), 5);
  ASSERT_EQ(b.piece_count(), 100u);
  std::vector<std::vector<std::int32_t>> expected(b.piece_count());
  std::uint64_t refusals = 0;
  for (std::uint64_t k = 0; k < b.piece_count(); ++k) {
    std::string why;
    if (b.read(k, b.piece_length(k), expected[k], why)) continue;
    ++refusals;
    EXPECT_EQ(b.member_of(k), 1u);
    EXPECT_EQ(b.member_piece(k), 3u);
    EXPECT_EQ(why, "/data/b: piece 3: binary");
    expected[k].clear();
  }
  EXPECT_GE(refusals, 2u);  // 50 slots over 20 pieces: piece 3 is read 2 or 3 times
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<std::int32_t> tokens;
      std::string why;
      for (int round = 0; round < 20; ++round) {
        for (std::uint64_t k = 0; k < b.piece_count(); ++k) {
          const std::uint64_t piece = (k * 37 + static_cast<std::uint64_t>(t)) % b.piece_count();
          if (!b.read(piece, b.piece_length(piece), tokens, why)) tokens.clear();
          mismatches[static_cast<std::size_t>(t)] += tokens != expected[piece];
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

TEST(BlendedPieces, TheLimitsAreRefusedNamingTheMember) {
  // 2^31 pieces at weight 1/2 take 2^32 virtual pieces.
  std::vector<BlendMember> big;
  big.push_back({.weight = 1, .source = std::make_shared<const Counted>(std::uint64_t{1} << 31, 1), .label = "/big"});
  big.push_back({.weight = 1, .source = std::make_shared<const Counted>(10, 2), .label = "/small"});
  const std::string e = error_of([&] { BlendedPieces b(big, 1); });
  EXPECT_THAT(e, HasSubstr("'/big' has 2147483648 pieces at weight 1 (50%)"));
  EXPECT_THAT(e, HasSubstr("4.29497e+09 virtual pieces, above the limit of 1073741824"));
  EXPECT_THAT(e, HasSubstr("give '/big' a larger weight"));

  const auto one = [](double weight, std::shared_ptr<const PieceSource> source) {
    std::vector<BlendMember> m;
    m.push_back({.weight = 1, .source = std::make_shared<const Counted>(3, 1), .label = "/ok"});
    m.push_back({.weight = weight, .source = std::move(source), .label = "/bad"});
    return error_of([&] { BlendedPieces b(std::move(m), 1); });
  };
  EXPECT_THAT(one(0, std::make_shared<const Counted>(3, 2)), HasSubstr("'/bad' has weight 0, not a positive"));
  EXPECT_THAT(one(-1, std::make_shared<const Counted>(3, 2)), HasSubstr("'/bad' has weight -1"));
  EXPECT_THAT(one(NAN, std::make_shared<const Counted>(3, 2)), HasSubstr("'/bad' has weight nan"));
  EXPECT_THAT(one(1, nullptr), HasSubstr("'/bad' has no piece source"));
  EXPECT_THAT(one(1, std::make_shared<const Counted>(0, 2)), HasSubstr("'/bad' holds no piece"));
  // A weight so small that the other member would need 10^12 virtual pieces.
  EXPECT_THAT(one(1e-12, std::make_shared<const Counted>(3, 2)), HasSubstr("'/bad' has 3 pieces at weight 1e-12"));
  EXPECT_THAT(error_of([] { BlendedPieces b({}, 1); }), HasSubstr("no dataset"));
  std::vector<BlendMember> many;
  for (int d = 0; d < 256; ++d) many.push_back({.weight = 1, .source = std::make_shared<const Counted>(1, d)});
  EXPECT_THAT(error_of([&] { BlendedPieces b(many, 1); }), HasSubstr("256 datasets, at most 255"));
  many.pop_back();
  EXPECT_EQ(BlendedPieces(many, 1).piece_count(), 255u);
}

TEST(BlendSpec, ParsesWeightPathPairsAndNamesEveryBadToken) {
  using Items = std::vector<std::pair<double, std::string>>;
  EXPECT_EQ(parse_blend_spec("0.7 /data/a 0.3 /data/b"), (Items{{0.7, "/data/a"}, {0.3, "/data/b"}}));
  EXPECT_EQ(parse_blend_spec("  2\t synthetic:github\n1e-3   prefix  +5 dir/ "),
            (Items{{2, "synthetic:github"}, {1e-3, "prefix"}, {5, "dir/"}}));
  EXPECT_EQ(parse_blend_spec("1 only"), (Items{{1, "only"}}));
  const auto error = [](std::string_view spec) { return error_of([&] { parse_blend_spec(spec); }); };
  EXPECT_EQ(error("x /a"),
            "--data: weight 'x' (item 1) is not a positive number; a blend is 'WEIGHT PATH WEIGHT PATH ...'");
  EXPECT_THAT(error("0.7 /a x /b"), HasSubstr("weight 'x' (item 3) is not a positive number"));
  EXPECT_THAT(error("/a 0.7 /b 0.3"), HasSubstr("weight '/a' (item 1)"));
  EXPECT_EQ(error("0.7 /a 0.3"), "--data: weight '0.3' (item 3) is given but no path follows it");
  for (const char* bad : {"0", "-1", "inf", "nan", "1e999", "0.7a", "0x10", "."}) {
    EXPECT_THAT(error(std::string("1 /a ") + bad + " /b"), HasSubstr(std::string("weight '") + bad + "' (item 3)"))
        << bad;
  }
  EXPECT_EQ(error(" \t\n"), "--data is empty");

  EXPECT_TRUE(is_blend_spec("0.7 /a 0.3 /b"));
  EXPECT_TRUE(is_blend_spec("1\t/a"));
  EXPECT_FALSE(is_blend_spec("/usr/include"));
  EXPECT_FALSE(is_blend_spec("synthetic:file:/some where/lengths.txt"));
  hdp::test::TempDir dir;
  const auto spaced = dir.path() / "my corpus";
  std::filesystem::create_directory(spaced);
  EXPECT_FALSE(is_blend_spec(spaced.string()));  // a single directory whose name holds a space
  EXPECT_TRUE(is_blend_spec(std::string(5000, '1') + " x"));  // too long a name to be a path: no exception
}

TrainerConfig blend_config(const std::string& data) {
  TrainerConfig c;
  c.model = model_preset("tiny");
  c.context = 64;
  c.capacity = 64;
  c.batch_tokens = 256;
  c.data = data;
  return c;
}

TEST(BlendSpec, OpenDataBuildsTheBlendAndNamesAMissingPath) {
  const auto source = open_data(blend_config("0.7 synthetic:github 0.3 synthetic:byted"));
  const auto* b = dynamic_cast<const BlendedPieces*>(source.get());
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(b->member_count(), 2u);
  EXPECT_EQ(b->member(0).label, "synthetic:github");
  EXPECT_DOUBLE_EQ(b->weight(1), 0.3);
  // The default 100,000 synthetic documents each: the smaller weight sets K.
  EXPECT_EQ(b->piece_count(), 333'334u);
  // Not a blend: the dataset itself.
  EXPECT_EQ(dynamic_cast<const BlendedPieces*>(open_data(blend_config("synthetic:github")).get()), nullptr);

  const std::string missing = "/nonexistent/hdp-blend-test";
  const std::string e = error_of([&] { open_data(blend_config("0.7 synthetic:github 0.3 " + missing)); });
  EXPECT_THAT(e, HasSubstr("--data: path '" + missing + "' (item 4)"));
  EXPECT_THAT(e, HasSubstr("does not exist"));
  EXPECT_THAT(error_of([&] { open_data(blend_config("0.7 synthetic:github 0.3")); }), HasSubstr("'0.3' (item 3)"));
  EXPECT_THAT(error_of([&] { open_data(blend_config("0.7 synthetic:nope 0.3 synthetic:github")); }),
              HasSubstr("'synthetic:nope' (item 2)"));
}

TEST(BlendSpec, ValidateChecksABlendsFormAndTheVocabularyOfEachDataset) {
  TrainerConfig c = blend_config("0.5 synthetic:github 0.5 synthetic:byted");
  c.model.vocab_size = 128;
  EXPECT_NO_THROW(c.validate());
  c.data = "0.5 synthetic:github 0.5 /usr/include";
  EXPECT_THAT(error_of([&] { c.validate(); }), HasSubstr("of '/usr/include' in the --data blend: use 256 or more"));
  c.data = "/usr/include";
  EXPECT_THAT(error_of([&] { c.validate(); }), HasSubstr("byte tokens (0-255): use 256 or more"));
  c.model.vocab_size = 256;
  c.data = "0.5 synthetic:github 0.5 /usr/include";
  EXPECT_NO_THROW(c.validate());
  // The form is checked whatever the vocabulary, before any dataset is opened.
  c.data = "0.5 synthetic:github 0.5";
  EXPECT_THAT(error_of([&] { c.validate(); }), HasSubstr("weight '0.5' (item 3) is given but no path follows it"));
}

}  // namespace
}  // namespace hdp::trainer::data
