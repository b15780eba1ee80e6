// Tests of trainer/data/batch_source.h over temporary trees: every step holds exactly its budget;
// two sources built independently agree step by step; a resumed run equals the uninterrupted one;
// an epoch visits every piece exactly once (whole when nothing is cut; a cut piece contributes a
// prefix and its remainder is dropped, never seen later in the epoch); budgets that cross or span
// epochs; refused (binary) pieces passed over alike everywhere; the epoch order pinned.
#include "trainer/data/batch_source.h"

#include <algorithm>
#include <map>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/error.h"
#include "tests/support/temp_dir.h"
#include "tests/trainer/data/data_tree.h"
#include "trainer/data/corpus.h"

namespace hdp::trainer::data {
namespace {

using checkpoint::DataPosition;
using hdp::test::make_text_tree;
using hdp::test::TempDir;
using hdp::test::text_bytes;
using hdp::test::write_file;
using ::testing::HasSubstr;

std::shared_ptr<const Corpus> index(const std::filesystem::path& root, std::int64_t context) {
  return std::make_shared<const Corpus>(root, CorpusOptions{.context = context});
}

// Epoch `epoch`'s order, every index looked up.
std::vector<std::uint64_t> order_of(std::uint64_t seed, std::uint64_t epoch, std::uint64_t n) {
  const KeyedPermutation order = epoch_order(seed, epoch, n);
  std::vector<std::uint64_t> out(n);
  for (std::uint64_t i = 0; i < n; ++i) out[i] = order(i);
  return out;
}

// A step's budget that varies with the step, so that cuts fall everywhere.
std::int64_t budget_of(int step) { return 300 + (step * 137) % 900; }

// What a run produced: every batch and the position after it.
struct StepRecord {
  std::vector<GlobalBatch> batches;
  std::vector<DataPosition> positions;
};

void run_steps(BatchSource& source, DataPosition& position, int from, int to, StepRecord& run) {
  for (int step = from; step < to; ++step) {
    run.batches.push_back(source.next(position, budget_of(step)));
    run.positions.push_back(position);
  }
}

void expect_same_batch(const GlobalBatch& a, const GlobalBatch& b, int step) {
  EXPECT_EQ(a.sequences, b.sequences) << "step " << step;
  EXPECT_EQ(a.pieces, b.pieces) << "step " << step;
  EXPECT_EQ(a.tokens, b.tokens) << "step " << step;
  EXPECT_EQ(a.dropped_tokens, b.dropped_tokens) << "step " << step;
  EXPECT_EQ(a.refused_pieces, b.refused_pieces) << "step " << step;
}

std::vector<std::int32_t> piece_tokens(const PieceSource& source, std::uint64_t piece) {
  std::vector<std::int32_t> tokens;
  std::string why;
  EXPECT_TRUE(source.read(piece, source.piece_length(piece), tokens, why)) << why;
  return tokens;
}

TEST(BatchSource, RejectsBadBudgetsPositionsAndSources) {
  TempDir dir("hdp-data");
  write_file(dir.path() / "a", text_bytes(100, 0));
  BatchSource source(index(dir.path(), 16), 1);  // 7 pieces
  DataPosition position;
  auto message = [&](std::int64_t budget) {
    try {
      source.next(position, budget);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_THAT(message(0), HasSubstr("token budget must be >= 1, got 0"));
  EXPECT_THAT(message(-7), HasSubstr("got -7"));
  position = {3, 8};
  EXPECT_THAT(message(10), ::testing::AllOf(HasSubstr("sample 8"), HasSubstr("epoch of 7 pieces")));
  EXPECT_EQ(position, (DataPosition{3, 8}));  // untouched
  position = {3, 7};                          // the very end of epoch 3: rolls over
  EXPECT_EQ(source.next(position, 5).pieces.front(), order_of(1, 4, 7)[0]);
  EXPECT_THROW(BatchSource(nullptr, 1), InvalidArgument);
}

TEST(BatchSource, EveryStepHoldsExactlyItsBudget) {
  TempDir dir("hdp-data");
  make_text_tree(dir.path(), 40, 300, 5);
  const auto corpus = index(dir.path(), 64);
  BatchSource source(corpus, 11);
  DataPosition position;
  for (std::int64_t budget : {1, 3, 63, 64, 65, 1000, 4096, 20000}) {
    const DataPosition before = position;
    const GlobalBatch batch = source.next(position, budget);
    const std::vector<std::int64_t> lengths = batch.lengths();
    EXPECT_EQ(std::accumulate(lengths.begin(), lengths.end(), std::int64_t{0}), budget);
    EXPECT_EQ(batch.tokens, budget);
    ASSERT_EQ(batch.pieces.size(), batch.sequences.size());
    for (std::size_t i = 0; i < batch.sequences.size(); ++i) {
      const std::int64_t full = corpus->piece_length(batch.pieces[i]);
      const bool last = i + 1 == batch.sequences.size();
      EXPECT_EQ(lengths[i], last ? full - batch.dropped_tokens : full) << "budget " << budget << " sequence " << i;
      EXPECT_LE(lengths[i], 64);
      std::vector<std::int32_t> expected = piece_tokens(*corpus, batch.pieces[i]);
      expected.resize(static_cast<std::size_t>(lengths[i]));
      EXPECT_EQ(batch.sequences[i], expected) << "budget " << budget << " sequence " << i;
    }
    // The position moved past exactly the pieces taken (none refused here).
    const std::uint64_t consumed = (position.epoch - before.epoch) * source.pieces_per_epoch() + position.sample -
                                   before.sample;
    EXPECT_EQ(consumed, batch.pieces.size()) << "budget " << budget;
  }
}

TEST(BatchSource, IndependentSourcesAgreeFor100Steps) {
  TempDir dir("hdp-data");
  make_text_tree(dir.path(), 60, 500, 7);
  // Two processes' worth: each indexes the tree itself and keeps its own position.
  BatchSource first(index(dir.path(), 128), 42), second(index(dir.path(), 128), 42);
  DataPosition a, b;
  StepRecord ra, rb;
  run_steps(first, a, 0, 100, ra);
  run_steps(second, b, 0, 100, rb);
  for (int step = 0; step < 100; ++step) {
    expect_same_batch(ra.batches[step], rb.batches[step], step);
    EXPECT_EQ(ra.positions[step], rb.positions[step]) << step;
  }
  EXPECT_GE(a.epoch, 2u);  // the 100 steps crossed epoch boundaries
  // Another seed gives other batches.
  BatchSource other(index(dir.path(), 128), 43);
  DataPosition c;
  EXPECT_NE(other.next(c, budget_of(0)).pieces, ra.batches[0].pieces);
}

// A source of a trillion pieces of 100 tokens each (every token of a piece is its number mod 30,000).
class HugeSource final : public PieceSource {
 public:
  static constexpr std::uint64_t kPieces = 1'000'000'000'000;
  std::uint64_t piece_count() const override { return kPieces; }
  std::int64_t piece_length(std::uint64_t) const override { return 100; }
  bool read(std::uint64_t piece, std::int64_t length, std::vector<std::int32_t>& tokens, std::string&) const override {
    tokens.assign(static_cast<std::size_t>(length), static_cast<std::int32_t>(piece % 30000));
    return true;
  }
  std::string fingerprint() const override { return "0123456789abcdef"; }
};

// The order is looked up piece by piece, never stored: a source over a trillion pieces (a whole
// epoch's permutation would be 8 TB) gives a step at the start of an epoch and across one, and two
// sources agree. The previous order, a shuffle of the whole epoch, could not be allocated. (The
// pieces of the step across the boundary, from two epochs' orders, are distinct for this seed; the
// design does not promise it, the fixed order makes it so every time.)
TEST(BatchSource, ATrillionPiecesNeedNoPerPieceMemoryNorWorkAtAnEpochsStart) {
  const auto huge = std::make_shared<const HugeSource>();
  BatchSource a(huge, 5), b(huge, 5);
  for (const DataPosition start : {DataPosition{0, 0}, DataPosition{3, HugeSource::kPieces - 2}}) {
    DataPosition p = start, q = start;
    const GlobalBatch x = a.next(p, 4096);
    expect_same_batch(x, b.next(q, 4096), 0);
    EXPECT_EQ(x.pieces.size(), 41u);  // 40 whole pieces and a cut one
    for (std::uint64_t piece : x.pieces) EXPECT_LT(piece, HugeSource::kPieces);
    EXPECT_EQ(std::set<std::uint64_t>(x.pieces.begin(), x.pieces.end()).size(), x.pieces.size());
    EXPECT_EQ(p, q);
  }
}

// What a checkpoint records beside its data position: the pieces' fingerprint with the order's
// name, so that the same data under another order (a position meaning other pieces) is told apart.
TEST(BatchSource, TheDataFingerprintACheckpointRecordsNamesTheOrderToo) {
  TempDir dir("hdp-data");
  make_text_tree(dir.path(), 10, 100, 3);
  const auto corpus = index(dir.path(), 64), same = index(dir.path(), 64), other = index(dir.path(), 32);
  const HugeSource huge;
  EXPECT_EQ(order_fingerprint(*corpus), order_fingerprint(*same));
  EXPECT_NE(order_fingerprint(*corpus), order_fingerprint(*other));
  EXPECT_NE(order_fingerprint(*corpus), corpus->fingerprint()) << "a checkpoint from before the order was named differs";
  EXPECT_NE(order_fingerprint(huge), huge.fingerprint());
  EXPECT_EQ(order_fingerprint(huge).size(), 16u);
  // What the restore makes of a recorded fingerprint (trainer/recovery.cc, check_data).
  EXPECT_EQ(compare_recorded(order_fingerprint(*same), *corpus), RecordedData::kSame);
  EXPECT_EQ(compare_recorded("", *corpus), RecordedData::kNotRecorded);
  EXPECT_EQ(compare_recorded(corpus->fingerprint(), *corpus), RecordedData::kEarlierOrder)
      << "a checkpoint written before the order was named: the same data, another order";
  EXPECT_EQ(compare_recorded(order_fingerprint(*other), *corpus), RecordedData::kOther);
  EXPECT_EQ(compare_recorded(other->fingerprint(), *corpus), RecordedData::kOther);
}

TEST(BatchSource, ResumeContinuesExactlyWhereTheSavedRunStopped) {
  TempDir dir("hdp-data");
  make_text_tree(dir.path(), 50, 400, 9);
  constexpr int kSteps = 80;
  StepRecord whole;
  {
    BatchSource source(index(dir.path(), 96), 3);
    DataPosition position;
    run_steps(source, position, 0, kSteps, whole);
  }
  for (int k : {0, 1, 13, 57, 79}) {
    StepRecord resumed;
    DataPosition saved;
    {
      BatchSource source(index(dir.path(), 96), 3);
      run_steps(source, saved, 0, k, resumed);
    }
    const DataPosition restored = saved;  // what a checkpoint carries
    DataPosition position = restored;
    BatchSource fresh(index(dir.path(), 96), 3);
    run_steps(fresh, position, k, kSteps, resumed);
    ASSERT_EQ(resumed.batches.size(), whole.batches.size());
    for (int step = 0; step < kSteps; ++step) {
      expect_same_batch(resumed.batches[step], whole.batches[step], step);
      EXPECT_EQ(resumed.positions[step], whole.positions[step]) << "resumed after " << k << ", step " << step;
    }
  }
}

TEST(BatchSource, AnEpochCoversEveryPieceOnceWhenNothingIsCut) {
  TempDir dir("hdp-data");
  // Sizes multiple of the context: every piece is 8 tokens, and a budget of 24 never cuts one.
  for (int f = 0; f < 17; ++f) write_file(dir.path() / ("f" + std::to_string(f)), text_bytes(8 * (1 + f % 3), f));
  const auto corpus = index(dir.path(), 8);
  const std::uint64_t n = corpus->piece_count();
  ASSERT_EQ(n, 33u);  // not a multiple of 3: steps cross the epoch boundaries
  BatchSource source(corpus, 99);
  DataPosition position;
  std::vector<std::uint64_t> taken;
  std::vector<std::vector<std::int32_t>> sequences;
  while (taken.size() < 3 * n) {
    GlobalBatch batch = source.next(position, 24);
    EXPECT_EQ(batch.dropped_tokens, 0);
    EXPECT_EQ(batch.sequences.size(), 3u);
    taken.insert(taken.end(), batch.pieces.begin(), batch.pieces.end());
    for (auto& s : batch.sequences) sequences.push_back(std::move(s));
  }
  for (std::uint64_t epoch = 0; epoch < 3; ++epoch) {
    const std::vector<std::uint64_t> visited(taken.begin() + static_cast<std::ptrdiff_t>(epoch * n),
                                             taken.begin() + static_cast<std::ptrdiff_t>((epoch + 1) * n));
    EXPECT_EQ(visited, order_of(99, epoch, n)) << "epoch " << epoch;
    std::vector<std::uint64_t> sorted = visited;
    std::sort(sorted.begin(), sorted.end());
    std::vector<std::uint64_t> all(n);
    std::iota(all.begin(), all.end(), std::uint64_t{0});
    EXPECT_EQ(sorted, all) << "epoch " << epoch;
    for (std::uint64_t i = 0; i < n; ++i) EXPECT_EQ(sequences[epoch * n + i], piece_tokens(*corpus, visited[i]));
  }
  EXPECT_NE(order_of(99, 0, n), order_of(99, 1, n));
}

TEST(BatchSource, ACutPieceGivesAPrefixAndItsRemainderIsDropped) {
  TempDir dir("hdp-data");
  make_text_tree(dir.path(), 30, 200, 13);
  const auto corpus = index(dir.path(), 50);
  const std::uint64_t n = corpus->piece_count();
  BatchSource source(corpus, 5);
  DataPosition position;
  // Every sequence, in order: its piece, its length, whether it was cut.
  struct Taken {
    std::uint64_t piece;
    std::int64_t length;
    std::int64_t dropped;
  };
  std::vector<Taken> taken;
  int cuts = 0;
  for (int step = 0; taken.size() < 2 * n; ++step) {
    const GlobalBatch batch = source.next(position, 97 + step % 5);  // budgets that cut most steps
    for (std::size_t i = 0; i < batch.pieces.size(); ++i) {
      const bool last = i + 1 == batch.pieces.size();
      taken.push_back({batch.pieces[i], static_cast<std::int64_t>(batch.sequences[i].size()),
                       last ? batch.dropped_tokens : 0});
    }
    cuts += batch.dropped_tokens > 0;
  }
  EXPECT_GT(cuts, 10);
  for (std::uint64_t epoch = 0; epoch < 2; ++epoch) {
    const std::vector<std::uint64_t> order = order_of(5, epoch, n);
    std::int64_t kept = 0, dropped = 0, total = 0;
    for (std::uint64_t i = 0; i < n; ++i) {
      const Taken& t = taken[epoch * n + i];
      // Each piece once per epoch, in the epoch's order, cut or not: a cut one is never seen again
      // in that epoch, its remainder is not carried.
      ASSERT_EQ(t.piece, order[i]) << "epoch " << epoch << " index " << i;
      EXPECT_EQ(t.length + t.dropped, corpus->piece_length(t.piece));
      kept += t.length;
      dropped += t.dropped;
      total += corpus->piece_length(t.piece);
    }
    EXPECT_EQ(kept + dropped, total);
    std::printf("epoch %llu: %lld of %lld tokens trained on, %lld dropped in cuts\n",
                static_cast<unsigned long long>(epoch), static_cast<long long>(kept), static_cast<long long>(total),
                static_cast<long long>(dropped));
  }
}

TEST(BatchSource, BudgetsAcrossAndBeyondEpochBoundaries) {
  TempDir dir("hdp-data");
  make_text_tree(dir.path(), 12, 100, 17);
  const auto corpus = index(dir.path(), 32);
  const std::uint64_t n = corpus->piece_count();
  std::int64_t epoch_tokens = 0;
  for (std::uint64_t p = 0; p < n; ++p) epoch_tokens += corpus->piece_length(p);
  BatchSource source(corpus, 8);

  // Exactly one epoch: the position rolls to the start of the next.
  DataPosition position;
  GlobalBatch batch = source.next(position, epoch_tokens);
  EXPECT_EQ(batch.pieces, order_of(8, 0, n));
  EXPECT_EQ(batch.dropped_tokens, 0);
  EXPECT_EQ(position, (DataPosition{1, 0}));

  // Two and a half epochs in one step: epochs 1 and 2 whole, then part of 3.
  batch = source.next(position, epoch_tokens * 5 / 2);
  std::vector<std::uint64_t> expected = order_of(8, 1, n);
  const std::vector<std::uint64_t> two = order_of(8, 2, n), three = order_of(8, 3, n);
  expected.insert(expected.end(), two.begin(), two.end());
  expected.insert(expected.end(), three.begin(), three.begin() + static_cast<std::ptrdiff_t>(position.sample));
  EXPECT_EQ(position.epoch, 3u);
  EXPECT_GT(position.sample, 0u);
  EXPECT_EQ(batch.pieces, expected);
  EXPECT_EQ(batch.tokens, epoch_tokens * 5 / 2);

  // A step that starts near the end of an epoch finishes it and goes on into the next.
  position = {7, n - 2};
  batch = source.next(position, 3 * 32);
  ASSERT_GE(batch.pieces.size(), 3u);
  EXPECT_EQ(batch.pieces[0], order_of(8, 7, n)[n - 2]);
  EXPECT_EQ(batch.pieces[1], order_of(8, 7, n)[n - 1]);
  EXPECT_EQ(batch.pieces[2], order_of(8, 8, n)[0]);
  EXPECT_EQ(position.epoch, 8u);
}

TEST(BatchSource, ABudgetBelowTheContextCutsEachPiece) {
  TempDir dir("hdp-data");
  for (int f = 0; f < 5; ++f) write_file(dir.path() / ("f" + std::to_string(f)), text_bytes(10000, f));
  const auto corpus = index(dir.path(), 4096);  // 3 pieces a document: 4096, 4096, 1808
  BatchSource source(corpus, 2);
  DataPosition position;
  for (int step = 0; step < 30; ++step) {
    const GlobalBatch batch = source.next(position, 100);
    ASSERT_EQ(batch.sequences.size(), 1u);
    EXPECT_EQ(batch.sequences[0].size(), 100u);
    EXPECT_EQ(batch.dropped_tokens, corpus->piece_length(batch.pieces[0]) - 100);
    const auto consumed = static_cast<std::uint64_t>(step + 1);  // one piece a step, 15 an epoch
    EXPECT_EQ(position, (DataPosition{consumed / 15, consumed % 15}));
  }
}

TEST(BatchSource, PassesOverBinaryPiecesAlikeInEveryProcess) {
  TempDir dir("hdp-data");
  make_text_tree(dir.path(), 20, 300, 21);
  std::string binary = text_bytes(500, 0);
  binary[10] = '\0';
  for (const char* name : {"bin/a", "bin/b", "d0/zz.bin"}) write_file(dir.path() / name, binary);
  const auto corpus = index(dir.path(), 64);
  std::vector<bool> is_binary(corpus->piece_count());
  for (std::uint64_t p = 0; p < corpus->piece_count(); ++p) {
    const std::string& path = corpus->document_path(corpus->locate(p).document);
    is_binary[p] = path.starts_with("bin/") || path == "d0/zz.bin";
  }
  BatchSource first(corpus, 4), second(index(dir.path(), 64), 4);
  DataPosition a, b;
  std::uint64_t refused = 0;
  for (int step = 0; step < 60; ++step) {
    const GlobalBatch x = first.next(a, budget_of(step));
    const GlobalBatch y = second.next(b, budget_of(step));
    expect_same_batch(x, y, step);
    EXPECT_EQ(a, b);
    for (std::uint64_t p : x.pieces) EXPECT_FALSE(is_binary[p]) << "piece " << p;
    refused += x.refused_pieces;
  }
  EXPECT_EQ(refused, first.refused_pieces());
  // 3 binary documents of 8 pieces each, refused once per epoch.
  EXPECT_GE(refused, 24u * a.epoch);
  EXPECT_LE(refused, 24u * (a.epoch + 1));
}

TEST(BatchSource, ThrowsWhenNoPieceCanBeRead) {
  TempDir dir("hdp-data");
  for (const char* name : {"a", "b"}) write_file(dir.path() / name, std::string("bin\0ary", 7));
  BatchSource source(index(dir.path(), 4), 1);
  DataPosition position{2, 1};
  try {
    source.next(position, 10);
    FAIL() << "a source of binary documents gave a batch";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), ::testing::AllOf(HasSubstr("no usable piece"), HasSubstr("binary")));
  }
  EXPECT_EQ(position, (DataPosition{2, 1}));
}

TEST(BatchSource, EpochOrderIsAPinnedSeededPermutation) {
  for (std::uint64_t n : {1u, 2u, 10u, 1000u}) {
    std::vector<std::uint64_t> order = order_of(7, 3, n);
    EXPECT_EQ(order, order_of(7, 3, n));
    std::sort(order.begin(), order.end());
    for (std::uint64_t i = 0; i < n; ++i) EXPECT_EQ(order[i], i);
  }
  EXPECT_NE(order_of(7, 0, 1000), order_of(8, 0, 1000));
  EXPECT_NE(order_of(7, 0, 1000), order_of(7, 1, 1000));
  // Pinned: a change here changes every job's data order, and resuming across versions with it
  // (kOrderScheme must then change too, which the next line checks beside it).
  EXPECT_THAT(order_of(7, 0, 10), ::testing::ElementsAre(4, 6, 7, 5, 8, 9, 0, 3, 1, 2));
  EXPECT_EQ(kOrderScheme, "feistel6-xxh3");
  // Each position is equally likely to hold each piece (chi-square, 20 x 20 cells, 20000 shuffles).
  std::vector<std::vector<int>> counts(20, std::vector<int>(20, 0));
  for (std::uint64_t epoch = 0; epoch < 20000; ++epoch) {
    const std::vector<std::uint64_t> order = order_of(1, epoch, 20);
    for (std::size_t i = 0; i < 20; ++i) ++counts[i][order[i]];
  }
  double chi2 = 0;
  for (const auto& row : counts) {
    for (int c : row) chi2 += (c - 1000.0) * (c - 1000.0) / 1000.0;
  }
  EXPECT_LT(chi2, 480.0);  // 361 degrees of freedom: mean 361, sd 27; 480 is > 4 sd
}

}  // namespace
}  // namespace hdp::trainer::data
