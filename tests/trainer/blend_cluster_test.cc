// Exactly-once over a blend of two indexed datasets, end to end: real `hdp agent` processes with
// real `hdp train` workers (the tiny model, 2 agents x 2 workers), a real redis-server, real HDF5
// checkpoints, `--data "0.6 A 0.4 B"` where A and B are Megatron indexed datasets this test writes
// (documents of random tokens; A's up to 300 tokens, cut into pieces of --context 128, B's up to 60).
//
// The same job runs twice:
//   (a) without faults (the reference);
//   (b) with a node SIGKILLed before step 20 (`--fault kill-node:2@20`: its agent and both workers;
//       the survivors go on from memory on 2 ranks), the node started again (4 ranks), then the job
//       stopped with SIGTERM to both agents (a final checkpoint) and resumed by a new job on the
//       same checkpoint directory to step 120.
// Rank 0's metrics file gives every executed step's loss, world size and data position after it.
// The assertions:
//   - (a)'s positions are those of the batch source rebuilt here from the same files (open_data,
//     BatchSource: the trainer's own data path, run again in this process);
//   - every step (b) executed, replays included, ends at (a)'s position for that step, so resize,
//     recovery and resume neither skip nor repeat a piece;
//   - the tokens of (b)'s steps 1..120, rebuilt from its positions, are counted by document against
//     the documents as this test wrote them (each sequence equal to the piece of its document, read
//     from the test's own copy): no virtual piece of the epoch taken twice, every document's tokens
//     at most its length times the times the blend reads it, the total the 120 steps' budget less the
//     cut remainders;
//   - (b)'s losses equal (a)'s: bitwise while only 4 ranks ever ran, within relative 1e-4 after a
//     step on 2 (the bound and its reason: trainer_cluster_test.cc).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <cmath>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "tests/agents/agent_cluster.h"
#include "tests/support/reference_run.h"
#include "tests/support/temp_dir.h"
#include "tests/trainer/run_records.h"
#include "trainer/data/batch_source.h"
#include "trainer/data/blend.h"
#include "trainer/data/indexed_writer.h"
#include "trainer/trainer_config.h"
#include "trainer/training_setup.h"

namespace hdp::test {
namespace {

using namespace std::chrono_literals;

constexpr int kSteps = 120;
constexpr std::int64_t kContext = 128;
constexpr std::int64_t kBudget = 512;  // 120 x 512 tokens stay in the blend's first epoch
constexpr std::uint64_t kSeed = 77;

// One dataset as written: its documents' tokens.
using Documents = std::vector<std::vector<std::int32_t>>;

Documents write_dataset(const std::filesystem::path& prefix, int documents, int max_length, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> length(1, max_length), token(0, 255);
  Documents docs(static_cast<std::size_t>(documents));
  trainer::data::IndexedDatasetWriter writer(prefix, 256);
  for (auto& doc : docs) {
    doc.resize(static_cast<std::size_t>(length(rng)));
    for (auto& t : doc) t = token(rng);
    writer.add_document(doc);
  }
  writer.finish();
  return docs;
}

// A dataset's pieces as this test understands the format: each document cut into pieces of
// kContext tokens, the last one shorter, numbered in document order.
struct PieceRef {
  std::size_t document = 0;
  std::size_t offset = 0;  // of the piece's first token in the document
  std::size_t length = 0;
};
std::vector<PieceRef> pieces_of(const Documents& docs) {
  std::vector<PieceRef> pieces;
  for (std::size_t d = 0; d < docs.size(); ++d) {
    for (std::size_t at = 0; at < docs[d].size(); at += kContext) {
      pieces.push_back({d, at, std::min<std::size_t>(kContext, docs[d].size() - at)});
    }
  }
  return pieces;
}

class BlendCluster : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = std::make_unique<TempDir>();
    docs_a_ = write_dataset(data_->path() / "a", 400, 300, 11);
    docs_b_ = write_dataset(data_->path() / "b", 600, 60, 12);
    reference_ = std::make_unique<ReferenceRun>([](const std::filesystem::path& dir) { return options_for(dir); },
                                                std::vector<std::string>{"n1", "n2"}, 240s);
  }
  static void TearDownTestSuite() {
    reference_.reset();
    data_.reset();
  }

  static std::string spec() {
    return "0.6 " + (data_->path() / "a").string() + " 0.4 " + (data_->path() / "b").string();
  }

  static ClusterOptions options_for(const std::filesystem::path& dir, std::vector<std::string> extra = {}) {
    ClusterOptions o;
    o.nnodes = "1:2";
    o.nproc = 2;
    o.train_args = {"--model",          "tiny",
                    "--steps",          std::to_string(kSteps),
                    "--context",        std::to_string(kContext),
                    "--capacity",       "128",
                    "--batch-tokens",   std::to_string(kBudget),
                    "--lr",             "3e-3",
                    "--warmup-steps",   "10",
                    "--seed",           std::to_string(kSeed),
                    "--data",           spec(),
                    "--checkpoint-dir", (dir / "ckpt").string(),
                    "--checkpoint-every", "10",
                    "--metrics-file",   (dir / "metrics.jsonl").string(),
                    "--timeout-ms",     "5000",
                    "--threads",        "1",
                    "--log-every",      "10",
                    "--no-speed-aware"};
    o.train_args.insert(o.train_args.end(), extra.begin(), extra.end());
    return o;
  }

  // The trainer's data path, rebuilt in this process from the same files and flags.
  static std::shared_ptr<const trainer::data::BlendedPieces> open_blend() {
    trainer::TrainerConfig config;
    config.model = trainer::model_preset("tiny");
    config.context = kContext;
    config.seed = kSeed;
    config.data = spec();
    auto blend = std::dynamic_pointer_cast<const trainer::data::BlendedPieces>(trainer::open_data(config));
    EXPECT_NE(blend, nullptr) << "--data with weights should open a blend";
    return blend;
  }

  static std::unique_ptr<TempDir> data_;
  static Documents docs_a_, docs_b_;
  static std::unique_ptr<ReferenceRun> reference_;
};

std::unique_ptr<TempDir> BlendCluster::data_;
Documents BlendCluster::docs_a_, BlendCluster::docs_b_;
std::unique_ptr<ReferenceRun> BlendCluster::reference_;

TEST_F(BlendCluster, ANodeLossAndAFullStopAndResumeTakeEveryPieceOfTheBlendOnce) {
  ASSERT_TRUE(reference_->ok()) << "the fault-free run did not complete";
  const auto blend = open_blend();
  ASSERT_NE(blend, nullptr);
  trainer::data::BatchSource source(blend, kSeed);

  // (a)'s positions are the batch source's, step after step from the start.
  const std::vector<StepLine>& reference = reference_->steps();
  ASSERT_EQ(reference.size(), static_cast<std::size_t>(kSteps));
  std::vector<checkpoint::DataPosition> after(kSteps + 1);  // after[s]: the position after step s
  for (int s = 1; s <= kSteps; ++s) {
    after[s] = after[s - 1];
    source.next(after[s], kBudget);
    ASSERT_EQ(reference[s - 1].step, s);
    ASSERT_EQ(reference[s - 1].world, 4);
    ASSERT_EQ(reference[s - 1].data, after[s]) << "step " << s << " of the fault-free run";
  }
  ASSERT_EQ(after[kSteps].epoch, 0u) << "the run should stay in the blend's first epoch (the count below assumes it)";

  // (b): a node lost, the node back, a full stop, a resume.
  TempDir dir;
  std::int64_t stopped_at = 0;
  std::string logs;
  {
    // Held (docs/testing.md, "Holding a job") at step 25 until the victim's rejoin (a new
    // generation) releases it, and at 28 until the stop: the order of events at any speed.
    AgentCluster cluster(options_for(dir.path(), {"--fault", "kill-node:2@20,hold:all@26:60000,hold:all@29:60000"}));
    cluster.start_agent("n1");
    cluster.start_agent("n2");
    const std::string victim = cluster.wait_for_dead_agent({"n1", "n2"}, 120s);
    ASSERT_FALSE(victim.empty()) << cluster.all_logs();
    const std::string survivor = victim == "n1" ? "n2" : "n1";
    ASSERT_GE(cluster.wait_for_members({survivor}, 30s), 0) << cluster.all_logs();
    ASSERT_GE(cluster.wait_until([&] { return cluster.step() >= 25; }, 60s), 0) << cluster.all_logs();
    cluster.start_agent(victim);
    ASSERT_GE(cluster.wait_for_members({"n1", "n2"}, 60s), 0) << cluster.all_logs();
    ASSERT_GE(cluster.wait_until([&] { return cluster.step() >= 28; }, 60s), 0) << cluster.all_logs();
    ASSERT_EQ(cluster.step(), 28) << "the job went past its hold";
    cluster.agent("n1").signal(SIGTERM);
    cluster.agent("n2").signal(SIGTERM);
    const auto codes = wait_for_agents(cluster, {"n1", "n2"}, 60s);
    EXPECT_EQ(codes.at("n1"), 4) << cluster.all_logs();
    EXPECT_EQ(codes.at("n2"), 4) << cluster.all_logs();
    const auto state = cluster.state();
    ASSERT_EQ(state.at("status"), "stopped") << cluster.all_logs();
    stopped_at = std::stoll(state.at("step"));
    EXPECT_EQ(stopped_at, 28) << "held at 28: the signals' boundary is the one after it";
    EXPECT_EQ(state.at("last_ckpt_step"), state.at("step")) << "the stop wrote a final checkpoint";
    logs += cluster.all_logs();
  }
  {
    AgentCluster cluster(options_for(dir.path()));  // a new job on the same checkpoint directory
    cluster.start_agent("n1");
    cluster.start_agent("n2");
    const auto codes = wait_for_agents(cluster, {"n1", "n2"}, 240s);
    EXPECT_EQ(codes.at("n1"), 0) << cluster.all_logs();
    EXPECT_EQ(codes.at("n2"), 0) << cluster.all_logs();
    EXPECT_NE(cluster.all_logs().find("restored"), std::string::npos);
    logs += cluster.all_logs();
  }

  const std::vector<StepLine> run = read_metrics(dir.path() / "metrics.jsonl");
  ASSERT_FALSE(run.empty());
  std::map<std::int64_t, checkpoint::DataPosition> last;  // the position the run's history holds for each step
  bool pure = true, shrank = false;
  int replayed = 0;
  double worst = 0;
  for (const StepLine& line : run) {
    ASSERT_GE(line.step, 1);
    ASSERT_LE(line.step, kSteps);
    EXPECT_EQ(line.data, after[line.step]) << "step " << line.step << " on " << line.world << " ranks";
    if (!last.emplace(line.step, line.data).second) ++replayed;
    if (line.world != 4) pure = false;
    shrank = shrank || line.world == 2;
    const double expected = reference_->loss(line.step);
    if (pure) {
      EXPECT_EQ(line.loss, expected) << "step " << line.step << " on 4 ranks, every step before it too";
    } else {
      const double rel = std::abs(line.loss - expected) / std::abs(expected);
      worst = std::max(worst, rel);
      EXPECT_LE(rel, 1e-4) << "step " << line.step << " on " << line.world << " ranks";
    }
  }
  EXPECT_TRUE(shrank) << "the job should have trained on the survivor's 2 ranks";
  EXPECT_EQ(run.back().step, kSteps);
  // A step without a line: rolled forward by a new generation in which no rank had computed its
  // loss (trainer_cluster_test.cc says when); the trainer logs it. Its position is then checked
  // through the step after it.
  expect_every_step_ran([&](std::int64_t step) { return last.contains(step); }, kSteps, logs);

  // Count the tokens of steps 1..120 by document, each step rebuilt from where the run's history
  // says the step before it ended, each sequence checked against the documents as written.
  const Documents* docs[2] = {&docs_a_, &docs_b_};
  const std::vector<PieceRef> pieces[2] = {pieces_of(docs_a_), pieces_of(docs_b_)};
  ASSERT_EQ(blend->member_count(), 2u);
  for (std::size_t d = 0; d < 2; ++d) ASSERT_EQ(blend->member(d).source->piece_count(), pieces[d].size());
  std::map<std::pair<std::size_t, std::size_t>, std::int64_t> by_document;  // {member, document} -> tokens
  std::map<std::pair<std::size_t, std::size_t>, int> reads;                   // {member, document} -> pieces taken
  std::set<std::uint64_t> taken;                                              // virtual pieces
  std::int64_t total = 0, dropped = 0, per_member[2] = {0, 0};
  std::uint64_t sequences = 0;
  checkpoint::DataPosition position;  // after the step before
  for (int s = 1; s <= kSteps; ++s) {
    if (auto it = last.find(s - 1); it != last.end()) position = it->second;
    const trainer::data::GlobalBatch batch = source.next(position, kBudget);
    if (last.contains(s)) {
      EXPECT_EQ(position, last.at(s)) << "step " << s;
    }
    dropped += batch.dropped_tokens;
    for (std::size_t i = 0; i < batch.sequences.size(); ++i) {
      const std::uint64_t k = batch.pieces[i];
      EXPECT_TRUE(taken.insert(k).second) << "virtual piece " << k << " taken twice in one epoch (step " << s << ")";
      const std::size_t member = blend->member_of(k);
      const PieceRef& ref = pieces[member].at(blend->member_piece(k));
      const std::vector<std::int32_t>& doc = (*docs[member])[ref.document];
      const auto& seq = batch.sequences[i];
      ASSERT_LE(seq.size(), ref.length);
      ASSERT_TRUE(std::equal(seq.begin(), seq.end(), doc.begin() + static_cast<std::ptrdiff_t>(ref.offset)))
          << "step " << s << ": sequence " << i << " is not the piece of document " << ref.document << " of member "
          << member << " at offset " << ref.offset;
      by_document[{member, ref.document}] += static_cast<std::int64_t>(seq.size());
      ++reads[{member, ref.document}];
      per_member[member] += static_cast<std::int64_t>(seq.size());
      total += static_cast<std::int64_t>(seq.size());
      ++sequences;
    }
  }
  EXPECT_EQ(total, kSteps * kBudget) << "every step holds exactly its budget";
  EXPECT_EQ(sequences, taken.size());
  for (const auto& [key, tokens] : by_document) {
    const auto& doc = (*docs[key.first])[key.second];
    const std::uint64_t times = (blend->member_pieces(key.first) + pieces[key.first].size() - 1) / pieces[key.first].size();
    EXPECT_LE(tokens, static_cast<std::int64_t>(doc.size() * times))
        << "document " << key.second << " of member " << key.first << ": more tokens than the blend reads of it";
  }
  // The virtual pieces taken are the first ones of epoch 0's order, so the members' shares of them
  // are the blend's weights within a few pieces (the order is a shuffle of the whole epoch).
  std::uint64_t from_a = 0;
  for (std::uint64_t k : taken) from_a += blend->member_of(k) == 0;
  const double share_a = static_cast<double>(from_a) / static_cast<double>(taken.size());
  EXPECT_NEAR(share_a, 0.6, 0.06) << "of " << taken.size() << " pieces";
  std::cout << "stopped at step " << stopped_at << "; " << replayed << " step(s) replayed; " << taken.size()
            << " pieces (" << from_a << " of A) from " << by_document.size() << " documents; tokens " << per_member[0]
            << " of A, " << per_member[1] << " of B, " << dropped << " cut; largest relative loss difference "
            << worst << "\n";
}

}  // namespace
}  // namespace hdp::test
