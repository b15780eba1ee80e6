// What the ranks of one job must share (trainer/job_identity.h): which settings change which part
// of a worker's identity and which do not, and the check at a generation's start: a rank that
// differs from the ranks holding the job's state is refused alone, the others go on without it; with
// no such ranks every rank of more than half the nodes is the job, and with no majority either (or
// holders that disagree) every rank refuses, naming the nodes on each side; the initial weights
// follow the same rule, each side named with its weights' digest.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "mesh/plan/cost_model_json.h"
#include "tests/support/temp_dir.h"
#include "tests/trainer/tiny_config.h"
#include "trainer/job_identity.h"

namespace hdp::trainer {
namespace {

TrainerConfig config() { return tiny_config(); }

JobIdentity identity(const TrainerConfig& c) { return job_identity(c, build_setup(c)); }

// The parts in which a changed configuration's identity differs from the default's.
std::vector<std::size_t> changed_parts(const TrainerConfig& changed) {
  const JobIdentity a = identity(config()), b = identity(changed);
  std::vector<std::size_t> parts;
  for (std::size_t p = 0; p < JobIdentity::kPartCount; ++p) {
    if (a.digest[p] != b.digest[p]) parts.push_back(p);
  }
  return parts;
}

TEST(JobIdentity, EachSettingThatMakesAnotherJobChangesItsPart) {
  using P = std::vector<std::size_t>;
  EXPECT_EQ(identity(config()), identity(config())) << "a function of the configuration";
  TrainerConfig c = config();
  c.data = "synthetic:byted";
  EXPECT_EQ(changed_parts(c), P{JobIdentity::kData});
  c = config();
  c.model.n_layers += 1;
  // The planner's estimated cost model follows the model's FLOPs: the training part moves too.
  EXPECT_EQ(changed_parts(c), (P{JobIdentity::kModel, JobIdentity::kTraining}));
  c = config();
  c.precision = ops::model::Precision::kBF16;
  EXPECT_EQ(changed_parts(c), P{JobIdentity::kModel});
  for (auto change : std::vector<void (*)(TrainerConfig&)>{
           [](TrainerConfig& x) { x.batch_tokens *= 2; },
           [](TrainerConfig& x) { x.steps += 1; }, [](TrainerConfig& x) { x.lr.peak *= 2; },
           [](TrainerConfig& x) { x.beta2 = 0.99f; }, [](TrainerConfig& x) { x.max_grad_norm = 0; },
           [](TrainerConfig& x) { x.speed_aware = false; }, [](TrainerConfig& x) { x.redundant_shards = false; },
           [](TrainerConfig& x) { x.checkpoint_dir = "ckpt"; }}) {
    c = config();
    change(c);
    EXPECT_EQ(changed_parts(c), P{JobIdentity::kTraining});
  }
  // The planner's cost model: from a file, or estimated for the device (a CPU and a GPU rank would
  // plan a step differently).
  test::TempDir dir;
  mesh::CostModel calibrated = build_setup(config()).cost;
  calibrated.gamma_ms *= 2;
  mesh::save_cost_model(calibrated, (dir.path() / "cost.json").string());
  c = config();
  c.cost_model = (dir.path() / "cost.json").string();
  EXPECT_EQ(changed_parts(c), P{JobIdentity::kTraining});
  c = config();
  c.device = ops::Device::kCuda;
  c.device_ordinal = 0;
  EXPECT_EQ(changed_parts(c), P{JobIdentity::kTraining});
  // The seed: the training's, and here the data's too (synthetic documents are drawn from it).
  c = config();
  c.seed += 1;
  EXPECT_EQ(changed_parts(c), (P{JobIdentity::kData, JobIdentity::kTraining}));
}

TEST(JobIdentity, WhatAWorkerSetsForItselfAndTheLiveSettingsDoNotCount) {
  TrainerConfig c = config();
  c.threads = 7;
  c.timeout = std::chrono::milliseconds(1234);
  c.metrics_file = "elsewhere.jsonl";
  c.max_rank_memory_bytes = 1 << 30;
  c.faults.push_back(parse_fault("crash:1@3"));
  c.checkpoint_every = 7;  // live (hdp config set)
  c.straggler_threshold = 0.5;
  EXPECT_EQ(identity(c), identity(config()));
}

// A corpus directory is known by its files' names and sizes (data::Corpus::fingerprint): the
// same files under another root are the same data; a file that grew is not.
TEST(JobIdentity, TheSameFilesAtAnotherPathAreTheSameDataAndOtherFilesAreNot) {
  test::TempDir a, b, other;
  for (const auto* dir : {&a, &b, &other}) {
    for (int i = 0; i < 3; ++i) {
      std::ofstream(dir->path() / ("doc" + std::to_string(i) + ".txt"))
          << std::string(300 + (dir == &other && i == 2 ? 1 : 0), static_cast<char>('a' + i));
    }
  }
  TrainerConfig c = config();
  c.data = a.path().string();
  const JobIdentity at_a = identity(c);
  c.data = b.path().string();
  EXPECT_EQ(identity(c), at_a);
  c.data = other.path().string();
  EXPECT_NE(identity(c).digest[JobIdentity::kData], at_a.digest[JobIdentity::kData]);
}

JobIdentity with(std::size_t part, std::uint64_t value) {
  JobIdentity id;
  id.digest[part] = value;
  return id;
}

// The outcome of check_one_job on rank `me`: "ok", "refused: <message>", "abandon: <message>" (the
// others refused) or "no job: <message>".
std::string verdict(const std::vector<JobIdentity>& ids, const std::vector<bool>& holds,
                    const std::vector<std::string>& nodes, int me) {
  const JobCheck c = check_one_job(ids, holds, nodes, me);
  switch (c.outcome) {
    case JobCheck::Outcome::kSame: return "ok";
    case JobCheck::Outcome::kRefused: return "refused: " + c.message;
    case JobCheck::Outcome::kOthersRefused: return "abandon: " + c.message;
    case JobCheck::Outcome::kNoJob: return "no job: " + c.message;
  }
  return "?";
}

TEST(JobIdentity, AJoinerThatDiffersFromTheRunningJobIsRefusedAloneAndTheOthersGoOnWithoutIt) {
  const JobIdentity job, other = with(JobIdentity::kData, 5);
  const std::vector<JobIdentity> ids = {job, job, job, job, other, other};
  const std::vector<bool> holds = {true, true, true, true, false, false};
  const std::vector<std::string> nodes = {"n1", "n1", "n2", "n2", "n3", "n3"};
  for (int me : {4, 5}) {
    const std::string v = verdict(ids, holds, nodes, me);
    EXPECT_EQ(v.rfind("refused: ", 0), 0u) << v;
    EXPECT_NE(v.find("node n3"), std::string::npos) << v;
    EXPECT_NE(v.find("in its data (its pieces or their order)"), std::string::npos) << v;
    EXPECT_NE(v.find("node n1 (ranks 0, 1), node n2 (ranks 2, 3)"), std::string::npos) << v;
    EXPECT_NE(v.find("leaves the job"), std::string::npos) << v;
  }
  for (int me : {0, 1, 2, 3}) {
    EXPECT_EQ(verdict(ids, holds, nodes, me),
              "abandon: node n3 (ranks 4, 5) differs from the running job in data (its pieces or their order): "
              "refused; the job goes on without it");
  }
  // A worker restarted with nothing (its state lost) that matches is no reason to refuse anyone.
  EXPECT_EQ(verdict({job, job, job}, {true, false, true}, {"n1", "n2", "n3"}, 1), "ok");
  // The job's side need not be the larger one: two joiners do not outvote one holder.
  const std::string v = verdict({job, other, other}, {true, false, false}, {"n1", "n2", "n3"}, 0);
  EXPECT_EQ(v.rfind("abandon: node n2 (rank 1), node n3 (rank 2) differ from the running job", 0), 0u) << v;
  // The refused nodes, once each, and every part any of them differs in.
  const JobCheck c = check_one_job({job, other, with(JobIdentity::kModel, 3), other}, {true, false, false, false},
                                   {"n1", "n2", "n2", "n3"}, 0);
  EXPECT_EQ(c.outcome, JobCheck::Outcome::kOthersRefused);
  EXPECT_EQ(c.refused_nodes, (std::vector<std::string>{"n2", "n3"}));
  EXPECT_EQ(c.recorder, 0);
  EXPECT_EQ(c.parts, "data (its pieces or their order), model (its shape, or its precision: --dtype)");
}

TEST(JobIdentity, WithNoRankHoldingTheJobAndNoMajorityEveryRankRefusesNamingBothSides) {
  const JobIdentity job, other = with(JobIdentity::kTraining, 9);
  const std::vector<JobIdentity> ids = {job, job, other, other};
  const std::vector<std::string> nodes = {"n1", "n1", "n2", "n2"};
  for (int me = 0; me < 4; ++me) {
    const std::string v = verdict(ids, {false, false, false, false}, nodes, me);
    EXPECT_EQ(v,
              "no job: the ranks were not started for one job: node n1 (ranks 0, 1); node n2 (ranks 2, 3) differs "
              "from them in training settings (including the planner's cost model, which follows --device and "
              "--cost-model) (no rank holds the job's state, and no side has every rank of more than half the "
              "nodes, to say which is the job): every rank refuses; start every node with the same data, model and "
              "settings");
  }
  // Three kinds, none above half: no job either.
  EXPECT_EQ(verdict({job, other, with(JobIdentity::kModel, 1)}, {false, false, false}, {"n1", "n2", "n3"}, 0)
                .rfind("no job: ", 0),
            0u);
  // Holders that disagree: nothing says which is the job either.
  const std::string v = verdict(ids, {true, false, true, false}, nodes, 1);
  EXPECT_NE(v.find("the ranks that hold the job's state disagree among themselves"), std::string::npos) << v;
  EXPECT_EQ(v.rfind("no job: ", 0), 0u) << v;
  // Several parts are all named.
  JobIdentity both = with(JobIdentity::kModel, 1);
  both.digest[JobIdentity::kBuild] = 2;
  EXPECT_EQ(differing_parts(both, job), "model (its shape, or its precision: --dtype), hdp version");
  EXPECT_EQ(verdict({job, job}, {false, false}, {"n1", "n2"}, 0), "ok");
}

// A job that starts (no rank holds state): every rank of more than half the nodes is the job, and a node that
// differs from them is refused alone, even when it holds rank 0 (the lowest rank of the job's side
// records the refusal).
TEST(JobIdentity, AtAStartTheMajorityIsTheJobAndANodeThatDiffersIsRefusedAlone) {
  const JobIdentity job, other = with(JobIdentity::kData, 4);
  const std::vector<JobIdentity> ids = {other, other, job, job, job, job};
  const std::vector<bool> none(6, false);
  const std::vector<std::string> nodes = {"n1", "n1", "n2", "n2", "n3", "n3"};
  for (int me : {0, 1}) {
    const JobCheck c = check_one_job(ids, none, nodes, me);
    EXPECT_EQ(c.outcome, JobCheck::Outcome::kRefused);
    EXPECT_EQ(c.message, "this worker (rank " + std::to_string(me) +
                             ", node n1) differs from the job's majority (node n2 (ranks 2, 3), node n3 (ranks 4, 5)) in "
                             "its data (its pieces or their order): it is refused, and its node leaves the job");
  }
  for (int me : {2, 3, 4, 5}) {
    const JobCheck c = check_one_job(ids, none, nodes, me);
    EXPECT_EQ(c.outcome, JobCheck::Outcome::kOthersRefused);
    EXPECT_EQ(c.message, "node n1 (ranks 0, 1) differs from the job's majority in data (its pieces or their order): "
                         "refused; the job goes on without it");
    EXPECT_EQ(c.refused_nodes, std::vector<std::string>{"n1"});
    EXPECT_EQ(c.recorder, 2);
  }
  // Nodes are counted, not ranks: one node of four workers does not outvote two of one.
  const JobCheck nodes_count = check_one_job({other, other, other, other, job, job}, none,
                                             {"n1", "n1", "n1", "n1", "n2", "n3"}, 0);
  EXPECT_EQ(nodes_count.outcome, JobCheck::Outcome::kRefused) << nodes_count.message;
  // A node whose own ranks differ (n3) leaves no majority, nor does exactly half of the nodes.
  EXPECT_EQ(verdict({job, job, other, other, job, other}, none, nodes, 0).rfind("no job: ", 0), 0u);
  EXPECT_EQ(verdict({job, job, other, other}, {false, false, false, false}, {"n1", "n2", "n3", "n4"}, 0).rfind("no job: ", 0),
            0u);
  // Holders that disagree decide nothing, whatever the others' majority.
  EXPECT_EQ(verdict({job, other, job, job, job}, {true, true, false, false, false}, {"n1", "n2", "n3", "n4", "n5"}, 2)
                .rfind("no job: ", 0),
            0u);
}

// Where the ranks initialise without a checkpoint: ranks that read other --init-from weights (or
// none, the seed's: digest 0) than every rank of more than half the nodes are refused, the others
// go on without them; ranks that held the job's state decide instead when there are any; with no
// side to say which is the job every rank refuses, each side named with its weights' digest;
// agreeing ranks pass, whatever their weights.
TEST(JobIdentity, RanksStartedFromOtherWeightsThanTheJobsSideAreRefusedAndWithoutOneEveryRank) {
  const std::vector<std::string> nodes = {"n1", "n1", "n2", "n2", "n3"};
  const std::vector<bool> none(5, false);
  EXPECT_EQ(check_initial_weights({7, 7, 7, 7, 7}, none, nodes, 0).outcome, JobCheck::Outcome::kSame);
  EXPECT_EQ(check_initial_weights({0, 0, 0, 0, 0}, none, nodes, 4).outcome, JobCheck::Outcome::kSame);
  for (int me = 0; me < 5; ++me) {
    const JobCheck c = check_initial_weights({0x11, 0x11, 0x22, 0x22, 0}, none, nodes, me);
    EXPECT_EQ(c.outcome, JobCheck::Outcome::kNoJob);
    EXPECT_EQ(c.message,
              "the ranks did not start from the same weights: node n1 (ranks 0, 1) from weights of xxh3 "
              "0000000000000011; node n2 (ranks 2, 3) from weights of xxh3 0000000000000022; node n3 (rank 4) from "
              "the seed's weights (no side has every rank of more than half the nodes): every rank refuses; give "
              "every node the same --init-from weights");
  }
  const std::vector<std::string> five = {"n1", "n2", "n3", "n4", "n5"};
  const std::vector<std::uint64_t> mostly = {0x11, 0x11, 0x11, 0x22, 0};
  for (int me : {3, 4}) {
    const JobCheck c = check_initial_weights(mostly, none, five, me);
    EXPECT_EQ(c.outcome, JobCheck::Outcome::kRefused);
    EXPECT_NE(c.message.find(", the job's majority (node n1 (rank 0), node n2 (rank 1), node n3 (rank 2)) from "
                             "weights of xxh3 0000000000000011: it is refused, and its node leaves the job"),
              std::string::npos)
        << c.message;
  }
  EXPECT_NE(check_initial_weights(mostly, none, five, 4).message.find("(rank 4, node n5) started from the seed's weights"),
            std::string::npos);
  for (int me : {0, 1, 2}) {
    const JobCheck c = check_initial_weights(mostly, none, five, me);
    EXPECT_EQ(c.outcome, JobCheck::Outcome::kOthersRefused);
    EXPECT_EQ(c.message, "node n4 (rank 3), node n5 (rank 4) start from other weights than the job's majority "
                         "(weights of xxh3 0000000000000011): refused; the job goes on without them");
    EXPECT_EQ(c.refused_nodes, (std::vector<std::string>{"n4", "n5"}));
    EXPECT_EQ(c.parts, "initial weights (--init-from)");
    EXPECT_EQ(c.recorder, 0);
  }
  // Ranks that held the job's state (a restart without a checkpoint) are the job, outnumbered or not.
  const JobCheck held = check_initial_weights(mostly, {false, false, false, true, false}, five, 0);
  EXPECT_EQ(held.outcome, JobCheck::Outcome::kRefused);
  EXPECT_NE(held.message.find("the running job (node n4 (rank 3)) from weights of xxh3 0000000000000022"),
            std::string::npos)
      << held.message;
  EXPECT_THROW(check_initial_weights({1, 2}, {false, false}, {"n1"}, 0), Error);
}

}  // namespace
}  // namespace hdp::trainer
