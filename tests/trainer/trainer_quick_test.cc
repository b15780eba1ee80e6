// The trainer with real processes at a size the sanitizer build can run (label integration):
// 1 agent x 2 workers, the tiny model on 64-token sequences, 24 steps, checkpoints every 4.
//  - a worker SIGKILLed before step 10 (`--fault crash:1@10`): its agent restarts it, the job
//    restores the newest committed checkpoint (step 8, or 4 if the crash came while step 8 was
//    being written) and completes; the `restore` event counts the steps lost from step 9 and says
//    why memory could not serve (one node: the crashed worker's optimizer shard had no copy);
//  - a configuration the workers cannot run (a corpus directory that does not exist): every
//    worker exits 2 with one line naming the directory, and the agent stops the job (exit 3, no
//    restarts) instead of restarting them;
//  - a context longer than the job's minimum size can hold (C x ranks): exit 2 naming both;
//  - a checkpoint directory written by a model of another shape: refused at restore with a message
//    naming both configurations, and the job stops the same way;
//  - the `state` hash deleted while the job trains: its `status` and `generation` are back within
//    5 s (rank 0 writes both with every step; a step here takes well under a second);
//  - the user's model path: a job's checkpoint exported (`hdp export`, f32), then a new job with
//    `--model-config` and `--init-from` on the export starts from exactly those weights (the
//    `restore` event's xxh3 equals the checkpoint's parameters') and completes; exported in bf16,
//    the weights loaded are the parameters rounded to bf16, bit for bit; a --context above the
//    export's max_position_embeddings runs and is recorded; a job resuming from its own checkpoint
//    ignores --init-from; two nodes started from other --init-from weights both refuse, naming each
//    side's weights;
//  - a Megatron indexed dataset (written by an independent Python writer) as `--data`: the job
//    trains on it and completes; resumed over a rewritten dataset it is refused (the checkpoint's
//    data fingerprint differs), and goes on with --allow-data-change; one holding a token id outside the model's vocabulary stops the
//    job (agent exit 3) with one line naming the file and the byte;
//  - validation: --eval-data every 4 steps reported in the metrics file, the log (in each step's
//    line), the state (and `hdp status`) and TensorBoard; with parameters that do not move the held-out loss on 2 and 4 ranks agrees within 1e-6; a flag without
//    its partner stops the job (exit 2 in every worker, 3 from the agent) naming both;
//  - mixed precision across a resume: an f32 job's checkpoint resumed by a `--dtype bf16` job, whose
//    own checkpoint holds f32 master weights (most are not bf16 values) and is resumed by an f32 job.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "checkpoint/checksum.h"
#include "elastic/job_keys.h"
#include "elastic/job_state.h"
#include "kernels/cpu/bf16.h"
#include "tests/agents/agent_cluster.h"
#include "tests/support/child_process.h"
#include "tests/support/temp_dir.h"
#include "tests/trainer/run_records.h"
#include "trainer/fault_injection.h"

namespace hdp::test {
namespace {

using namespace std::chrono_literals;

ClusterOptions quick(const std::filesystem::path& dir, std::vector<std::string> extra) {
  ClusterOptions o;
  o.nnodes = "1:1";
  o.nproc = 2;
  o.train_args = {"--model", "tiny", "--steps", "24", "--context", "64", "--capacity", "64", "--batch-tokens",
                  "256", "--checkpoint-dir", (dir / "ckpt").string(), "--checkpoint-every", "4", "--timeout-ms",
                  "20000", "--threads", "1", "--log-every", "4"};
  o.train_args.insert(o.train_args.end(), extra.begin(), extra.end());
  return o;
}

TEST(TrainerQuick, ACrashedWorkerIsReplacedAndTheJobCompletesFromTheLastCheckpoint) {
  TempDir dir;
  AgentCluster cluster(quick(dir.path(), {"--fault", "crash:1@10"}));
  cluster.start_agent("n1");
  const auto status = cluster.agent("n1").wait_for(180s);
  ASSERT_TRUE(status.has_value()) << cluster.all_logs();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << *status << "\n" << cluster.all_logs();
  EXPECT_EQ(cluster.state()["step"], "24");
  EXPECT_EQ(cluster.get(trainer::fault_key(0)), "crash:1@10");
  elastic::JobState job(cluster.store());
  bool rolled_back = false;
  for (const auto& e : job.snapshot(elastic::kEventsKept).events) {
    std::map<std::string, std::string> f(e.fields.begin(), e.fields.end());
    // The first restore from a checkpoint is the crash's rollback (a later one may follow when
    // the restarted worker rejoins a generation that ran without it).
    if (!rolled_back && f["type"] == "restore" && f["checkpoint"].starts_with("step-")) {
      // The newest committed checkpoint: step 8, or step 4 when the save of step 8 was still being
      // written when the crash came (a loaded machine). Step 9 had completed on every rank.
      rolled_back = true;
      const int step = std::stoi(f["step"]);
      EXPECT_TRUE(step == 8 || step == 4) << step;
      EXPECT_EQ(f["lost_steps"], std::to_string(9 - step));
      // One node: no copies, so the crashed worker's shard is gone from memory, and the event says so.
      EXPECT_NE(f["reason"].find("rank 1's optimizer shard"), std::string::npos) << f["reason"];
    }
  }
  EXPECT_TRUE(rolled_back) << cluster.all_logs();
}

TEST(TrainerQuick, ADeletedStateHashGetsItsStatusAndGenerationBack) {
  TempDir dir;
  AgentCluster cluster(quick(dir.path(), {"--steps", "100000"}));
  cluster.start_agent("n1");
  ASSERT_GE(cluster.wait_until([&] { return cluster.step() >= 3; }, 120s), 0) << cluster.all_logs();
  ASSERT_TRUE(cluster.store()->erase(elastic::keys::kState));
  const std::string generation = std::to_string(cluster.generation());
  const double took = cluster.wait_until(
      [&] {
        auto state = cluster.state();
        return state["status"] == "running" && state["generation"] == generation;
      },
      5s);
  EXPECT_GE(took, 0) << "state after 5 s: status '" << cluster.state()["status"] << "', generation '"
                     << cluster.state()["generation"] << "' (current " << generation << ")\n"
                     << cluster.all_logs();
}

TEST(TrainerQuick, AConfigurationTheWorkersCannotRunStopsTheJob) {
  TempDir dir;
  AgentCluster cluster(quick(dir.path(), {"--data", (dir.path() / "no-such-corpus").string()}));
  cluster.start_agent("n1");
  const auto status = cluster.agent("n1").wait_for(60s);
  ASSERT_TRUE(status.has_value()) << cluster.all_logs();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 3) << *status << "\n" << cluster.all_logs();
  const std::string logs = cluster.all_logs();
  EXPECT_NE(logs.find("no-such-corpus"), std::string::npos) << logs;
  EXPECT_EQ(logs.find("restart 1/"), std::string::npos) << "a worker that exits 2 is not restarted\n" << logs;
}

TEST(TrainerQuick, AContextTheJobsRanksCannotHoldIsRefused) {
  TempDir dir;
  // 2 ranks of C = 64 hold sequences of up to 128 tokens; the job never has more (--nnodes 1:1).
  AgentCluster cluster(quick(dir.path(), {"--context", "1000"}));
  cluster.start_agent("n1");
  const auto status = cluster.agent("n1").wait_for(60s);
  ASSERT_TRUE(status.has_value()) << cluster.all_logs();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 3) << *status << "\n" << cluster.all_logs();
  EXPECT_NE(cluster.all_logs().find("hdp: error: --context 1000 does not fit 2 rank(s) of --capacity 64"),
            std::string::npos)
      << cluster.all_logs();
}

TEST(TrainerQuick, ACheckpointOfAnotherModelShapeIsRefused) {
  TempDir dir;
  {
    AgentCluster cluster(quick(dir.path(), {}));
    cluster.start_agent("n1");
    const auto status = cluster.agent("n1").wait_for(180s);
    ASSERT_TRUE(status.has_value() && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << cluster.all_logs();
  }
  AgentCluster cluster(quick(dir.path(), {"--d-model", "32"}));  // the same directory, a narrower model
  cluster.start_agent("n1");
  const auto status = cluster.agent("n1").wait_for(60s);
  ASSERT_TRUE(status.has_value()) << cluster.all_logs();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 3) << *status << "\n" << cluster.all_logs();
  const std::string logs = cluster.all_logs();
  EXPECT_NE(logs.find("hdp: error: "), std::string::npos) << logs;
  EXPECT_NE(logs.find("differs from the job's"), std::string::npos) << logs;
}

// The restore events of a run, each as its fields.
std::vector<std::map<std::string, std::string>> restore_events(AgentCluster& cluster) {
  std::vector<std::map<std::string, std::string>> out;
  for (const auto& e : elastic::JobState(cluster.store()).snapshot(elastic::kEventsKept).events) {
    std::map<std::string, std::string> f(e.fields.begin(), e.fields.end());
    if (f["type"] == "restore") out.push_back(std::move(f));
  }
  return out;
}

// A new job (the quick one) from `exported` (--model-config and --init-from, then `extra`) runs to
// its end and starts from exactly `weights`: its restore event's source is init_from, at step 0,
// with their xxh3.
void expect_job_starts_from(const std::filesystem::path& exported, const std::vector<float>& weights,
                            const std::vector<std::string>& extra) {
  TempDir second;
  std::vector<std::string> args = {"--model-config", (exported / "config.json").string(), "--init-from", exported.string()};
  args.insert(args.end(), extra.begin(), extra.end());
  AgentCluster cluster(quick(second.path(), args));  // quick() names --model tiny too: --model-config replaces it
  cluster.start_agent("n1");
  const auto status = cluster.agent("n1").wait_for(180s);
  ASSERT_TRUE(status.has_value() && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << cluster.all_logs();
  const auto events = restore_events(cluster);
  EXPECT_FALSE(events.empty()) << cluster.all_logs();
  for (const auto& f : events) {
    EXPECT_EQ(f.at("source"), "init_from");
    EXPECT_EQ(f.at("step"), "0");
    EXPECT_EQ(f.at("weights_xxh3"), checkpoint::to_hex(checkpoint::xxh3(std::span<const float>(weights))))
        << "the new job's initial weights are not the exported ones, bit for bit";
  }
  EXPECT_EQ(cluster.state()["status"], "completed");
}

// Runs the quick job (one node) under `dir` to its end; its final checkpoint.
Final train_to_completion(const std::filesystem::path& dir) {
  AgentCluster cluster(quick(dir, {}));
  cluster.start_agent("n1");
  const auto status = cluster.agent("n1").wait_for(180s);
  EXPECT_TRUE(status.has_value() && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << cluster.all_logs();
  return read_final(dir / "ckpt");
}

TEST(TrainerQuick, AnExportedCheckpointStartsANewJobFromExactlyItsWeights) {
  TempDir dir;
  const Final trained = train_to_completion(dir.path());
  ASSERT_EQ(trained.step, 24);
  const std::string hdp = std::string(std::getenv("HDP_BIN_DIR")) + "/hdp";
  const auto exported = dir.path() / "export";
  const CommandResult r = run_command({hdp, "export", (dir.path() / "ckpt").string(), "--out", exported.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_job_starts_from(exported, trained.params, {"--seed", "5"});
}

// The bf16 export: the same job's checkpoint exported with --dtype bf16 starts a new job whose
// initial weights are the trained parameters rounded to bf16 (to nearest even, back to f32), bit
// for bit: the rounding is deterministic. The new job trains at --context 128, above the export's
// max_position_embeddings (64, the context the first job trained at): no error, and its own
// checkpoints and export record 128. Started again over its own checkpoints, with --init-from still
// given, it resumes from them: the restore event's source is the checkpoint, not the export.
TEST(TrainerQuick, ABf16ExportStartsANewJobFromTheRoundedWeightsAndAResumeIgnoresInitFrom) {
  TempDir dir;
  const Final trained = train_to_completion(dir.path());
  ASSERT_EQ(trained.step, 24);
  std::vector<float> rounded(trained.params.size());
  std::size_t moved = 0;
  for (std::size_t i = 0; i < rounded.size(); ++i) {
    rounded[i] = kernels::cpu::bf16_to_f32(kernels::cpu::f32_to_bf16(trained.params[i]));
    moved += rounded[i] != trained.params[i];
  }
  ASSERT_GT(moved, rounded.size() / 2) << "the trained weights are bf16 values already: the case would prove nothing";
  const std::string hdp = std::string(std::getenv("HDP_BIN_DIR")) + "/hdp";
  const auto exported = dir.path() / "export";
  CommandResult r = run_command({hdp, "export", (dir.path() / "ckpt").string(), "--out", exported.string(), "--dtype", "bf16"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto config_of = [](const std::filesystem::path& export_dir) {
    std::ifstream in(export_dir / "config.json");
    return nlohmann::json::parse(in, nullptr, false);
  };
  EXPECT_EQ(config_of(exported).value("max_position_embeddings", -1), 64);

  TempDir second;
  const std::vector<std::string> from_export = {"--model-config", (exported / "config.json").string(), "--init-from",
                                                exported.string(), "--context", "128"};
  // Runs the job from the export to step `steps` (over `second`'s checkpoints, if any); its restore
  // events.
  auto run_to = [&](const char* steps) {
    std::vector<std::string> args = from_export;
    args.insert(args.end(), {"--steps", steps});
    AgentCluster cluster(quick(second.path(), args));
    cluster.start_agent("n1");
    const auto status = cluster.agent("n1").wait_for(180s);
    EXPECT_TRUE(status.has_value() && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << cluster.all_logs();
    EXPECT_EQ(cluster.state()["step"], steps);
    const auto events = restore_events(cluster);
    EXPECT_FALSE(events.empty()) << cluster.all_logs();
    return events;
  };
  auto events = run_to("8");
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0].at("source"), "init_from");
  EXPECT_EQ(events[0].at("weights_xxh3"), checkpoint::to_hex(checkpoint::xxh3(std::span<const float>(rounded))))
      << "the new job's initial weights are not the trained ones rounded to bf16, bit for bit";
  std::ifstream manifest(second.path() / "ckpt" / "step-00000008" / "manifest.json");
  EXPECT_EQ(nlohmann::json::parse(manifest, nullptr, false)["model_config"].value("max_position_embeddings", -1), 128);
  r = run_command({hdp, "export", (second.path() / "ckpt").string(), "--out", (second.path() / "export").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(config_of(second.path() / "export").value("max_position_embeddings", -1), 128);

  events = run_to("12");
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0].at("source"), "checkpoint") << "a job with checkpoints of its own took --init-from";
  EXPECT_EQ(events[0].at("step"), "8");
  EXPECT_EQ(events[0].count("weights_xxh3"), 0u);
}

// Two nodes started from other --init-from weights (one node's export f32, the other's bf16 of the
// same checkpoint: the same model, other bits) would stitch two models into one at the first step
// (trainer/job_identity.h, check_initial_weights): one node against one is no majority, so every
// worker refuses before any step (exit 2,
// each agent exits 3), each log naming both nodes with the digest of the weights it read.
TEST(TrainerQuick, NodesStartedFromOtherWeightsAllRefuseNamingEachSidesWeights) {
  TempDir dir;
  const Final trained = train_to_completion(dir.path());
  ASSERT_EQ(trained.step, 24);
  const std::string hdp = std::string(std::getenv("HDP_BIN_DIR")) + "/hdp";
  const auto f32 = dir.path() / "f32", bf16 = dir.path() / "bf16";
  ASSERT_EQ(run_command({hdp, "export", (dir.path() / "ckpt").string(), "--out", f32.string()}).exit_code, 0);
  ASSERT_EQ(run_command({hdp, "export", (dir.path() / "ckpt").string(), "--out", bf16.string(), "--dtype", "bf16"}).exit_code, 0);
  std::vector<float> rounded(trained.params.size());
  for (std::size_t i = 0; i < rounded.size(); ++i) {
    rounded[i] = kernels::cpu::bf16_to_f32(kernels::cpu::f32_to_bf16(trained.params[i]));
  }
  ASSERT_NE(rounded, trained.params) << "the two exports would hold the same weights: the case would prove nothing";

  TempDir second;
  ClusterOptions o = quick(second.path(), {"--model-config", (f32 / "config.json").string()});
  o.nnodes = "2:2";
  AgentCluster cluster(o);
  cluster.start_agent("n1", {}, {"HDP_INIT_FROM=" + f32.string()});
  cluster.start_agent("n2", {}, {"HDP_INIT_FROM=" + bf16.string()});
  for (const std::string node : {"n1", "n2"}) {
    const auto status = cluster.agent(node).wait_for(120s);
    ASSERT_TRUE(status.has_value()) << cluster.all_logs();
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 3) << node << ": " << *status << "\n" << cluster.all_logs();
  }
  const std::string f32_digest = checkpoint::to_hex(checkpoint::xxh3(std::span<const float>(trained.params)));
  const std::string bf16_digest = checkpoint::to_hex(checkpoint::xxh3(std::span<const float>(rounded)));
  for (const std::string node : {"n1", "n2"}) {
    const std::string log = cluster.agent_log(node);
    for (const std::string& part : {std::string("the ranks did not start from the same weights: node n"),
                                   "from weights of xxh3 " + f32_digest, "from weights of xxh3 " + bf16_digest,
                                   std::string("(no side has every rank of more than half the nodes): every rank refuses; give "
                                               "every node the same --init-from weights")}) {
      EXPECT_NE(log.find(part), std::string::npos) << node << ": " << part << "\n" << log;
    }
  }
  EXPECT_EQ(cluster.state().count("step"), 0u) << "no step ran";
}

// PREFIX.{idx,bin} of `documents` (token ids below `vocab`, plus one `bad` id when asked), written by
// tests/trainer/data/write_indexed.py.
std::filesystem::path indexed_dataset(const std::filesystem::path& dir, int documents, int vocab, int bad = -1) {
  nlohmann::json docs = nlohmann::json::array();
  for (int d = 0; d < documents; ++d) {
    nlohmann::json tokens = nlohmann::json::array();
    for (int t = 0; t < 20 + (d * 37) % 150; ++t) tokens.push_back((d * 131 + t * 17) % vocab);
    if (d == documents / 2 && bad >= 0) tokens.push_back(bad);
    docs.push_back(nlohmann::json::array({tokens}));
  }
  const auto prefix = dir / "tokens";
  std::ofstream(dir / "docs.json") << docs.dump();
  const CommandResult r = run_command({"/bin/sh", "-c", "/usr/bin/python3 '" + std::string(HDP_SOURCE_DIR) +
                                                            "/tests/trainer/data/write_indexed.py' '" + prefix.string() +
                                                            "' 8 < '" + (dir / "docs.json").string() + "'"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return prefix;
}

TEST(TrainerQuick, AMegatronIndexedDatasetIsTrainedOnResumedOnlyOverItselfAndABadTokenIdStopsTheJob) {
  TempDir dir;
  {
    AgentCluster cluster(quick(dir.path(), {"--data", indexed_dataset(dir.path(), 400, 256).string()}));
    cluster.start_agent("n1");
    const auto status = cluster.agent("n1").wait_for(180s);
    ASSERT_TRUE(status.has_value() && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << cluster.all_logs();
    EXPECT_NE(cluster.all_logs().find("data: indexed dataset"), std::string::npos) << cluster.all_logs();
    EXPECT_EQ(cluster.state()["status"], "completed");
  }
  // The checkpoints record the data's fingerprint; 4 more steps over a rewritten dataset (300
  // documents where there were 400) are refused at the restore, then allowed.
  std::ifstream manifest(dir.path() / "ckpt" / "step-00000024" / "manifest.json");
  const nlohmann::json recorded = nlohmann::json::parse(manifest, nullptr, false);
  ASSERT_TRUE(recorded.contains("data_fingerprint")) << recorded.dump();
  EXPECT_EQ(recorded["data_fingerprint"].get<std::string>().size(), 16u);
  const std::string changed = indexed_dataset(dir.path(), 300, 256).string();
  {
    AgentCluster cluster(quick(dir.path(), {"--data", changed, "--steps", "28"}));
    cluster.start_agent("n1");
    const auto status = cluster.agent("n1").wait_for(180s);
    ASSERT_TRUE(status.has_value()) << cluster.all_logs();
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 3) << *status << "\n" << cluster.all_logs();
    const std::string logs = cluster.all_logs();
    EXPECT_NE(logs.find("hdp: error: the checkpoint "), std::string::npos) << logs;
    EXPECT_NE(logs.find("was written over other data than --data"), std::string::npos) << logs;
    EXPECT_NE(logs.find("--allow-data-change"), std::string::npos) << logs;
  }
  {
    AgentCluster cluster(quick(dir.path(), {"--data", changed, "--steps", "28", "--allow-data-change"}));
    cluster.start_agent("n1");
    const auto status = cluster.agent("n1").wait_for(180s);
    ASSERT_TRUE(status.has_value() && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << cluster.all_logs();
    EXPECT_NE(cluster.all_logs().find("resuming anyway (--allow-data-change)"), std::string::npos) << cluster.all_logs();
    EXPECT_EQ(cluster.state()["step"], "28");
  }
  TempDir bad;
  AgentCluster cluster(quick(bad.path(), {"--data", indexed_dataset(bad.path(), 40, 256, 300).string()}));
  cluster.start_agent("n1");
  const auto status = cluster.agent("n1").wait_for(180s);
  ASSERT_TRUE(status.has_value()) << cluster.all_logs();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 3) << *status << "\n" << cluster.all_logs();
  const std::string logs = cluster.all_logs();
  EXPECT_NE(logs.find("token id 300 at byte"), std::string::npos) << logs;
  EXPECT_NE(logs.find("outside the model's vocabulary of 256"), std::string::npos) << logs;
}

TEST(TrainerQuick, ABf16JobResumesAnF32CheckpointKeepsF32MasterWeightsAndAnF32JobResumesIt) {
  TempDir dir;
  // The restore event of a run: the step it restored.
  auto restored_step = [](AgentCluster& cluster) {
    for (const auto& e : elastic::JobState(cluster.store()).snapshot(elastic::kEventsKept).events) {
      std::map<std::string, std::string> f(e.fields.begin(), e.fields.end());
      if (f["type"] == "restore") return f["step"];
    }
    return std::string("none");
  };
  auto run = [&](const std::string& steps, const std::string& dtype, const std::string& resumed) {
    AgentCluster cluster(quick(dir.path(), {"--steps", steps, "--dtype", dtype}));
    cluster.start_agent("n1");
    const auto status = cluster.agent("n1").wait_for(180s);
    ASSERT_TRUE(status.has_value() && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << cluster.all_logs();
    EXPECT_EQ(cluster.state()["status"], "completed");
    EXPECT_NE(cluster.all_logs().find(dtype + " training"), std::string::npos) << cluster.all_logs();
    if (!resumed.empty()) {
      EXPECT_EQ(restored_step(cluster), resumed) << cluster.all_logs();
    }
  };
  run("12", "f32", "");
  run("24", "bf16", "12");
  // The bf16 job's checkpoint holds the f32 master weights: most of them are not bf16 values.
  const Final mixed = read_final(dir.path() / "ckpt");
  ASSERT_EQ(mixed.step, 24);
  std::size_t not_bf16 = 0;
  for (float p : mixed.params) not_bf16 += kernels::cpu::bf16_to_f32(kernels::cpu::f32_to_bf16(p)) != p;
  EXPECT_GT(not_bf16, mixed.params.size() / 2) << "the checkpoint holds bf16-rounded weights, not the f32 master";
  run("28", "f32", "24");
  EXPECT_EQ(read_final(dir.path() / "ckpt").step, 28);
}

// The eval_loss lines of a --metrics-file, by step.
std::map<std::int64_t, double> eval_losses(const std::filesystem::path& file) {
  std::map<std::int64_t, double> out;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("eval_loss")) out[j.at("step").get<std::int64_t>()] = j.at("eval_loss").get<double>();
  }
  return out;
}

TEST(TrainerQuick, TheHeldOutLossIsReportedEveryNStepsAndIsTheSameOnTwoAndFourRanks) {
  TempDir dir;
  // Held out from the training corpus (C headers): Debian's license texts.
  const std::string eval_data = "/usr/share/common-licenses";
  {
    // Training (lr as usual): eval_loss at steps 4, 8, ..., 24 in the metrics file, the log (in the
    // step's line, logged although --log-every 5 skips most of those steps), the state (with
    // eval_step; `hdp status` shows it) and the TensorBoard events.
    AgentCluster cluster(quick(dir.path(), {"--eval-data", eval_data, "--eval-every", "4", "--eval-tokens", "2000",
                                            "--metrics-file", (dir.path() / "m.jsonl").string(), "--tensorboard-dir",
                                            (dir.path() / "tb").string(), "--log-every", "5"}));
    cluster.start_agent("n1");
    const auto status = cluster.agent("n1").wait_for(180s);
    ASSERT_TRUE(status.has_value() && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << cluster.all_logs();
    const auto evals = eval_losses(dir.path() / "m.jsonl");
    std::vector<std::int64_t> steps;
    for (const auto& [step, loss] : evals) {
      steps.push_back(step);
      EXPECT_TRUE(std::isfinite(loss) && loss > 0) << loss;
    }
    EXPECT_EQ(steps, (std::vector<std::int64_t>{4, 8, 12, 16, 20, 24}));
    EXPECT_LT(evals.rbegin()->second, evals.begin()->second) << "training lowers the held-out loss";
    auto state = cluster.state();
    EXPECT_EQ(state["eval_step"], "24");
    EXPECT_NEAR(std::stod(state["eval_loss"]), evals.at(24), 1e-5);
    // Each evaluation in its step's one line: "step 4/24  loss ...  tokens/s ...  eval_loss ...".
    std::vector<std::int64_t> logged;
    std::istringstream logs(cluster.all_logs());
    for (std::string line; std::getline(logs, line);) {
      const auto at = line.find("eval_loss ");
      if (at == std::string::npos) continue;
      const auto begin = line.find("step ");
      ASSERT_NE(begin, std::string::npos) << "eval_loss outside a step line: " << line;
      EXPECT_NE(line.find("  loss "), std::string::npos) << line;
      EXPECT_LT(line.find(" tokens/s "), at) << line;
      logged.push_back(std::stoll(line.substr(begin + 5)));
    }
    EXPECT_EQ(logged, steps) << cluster.all_logs();
    const CommandResult shown =
        run_command({cluster.hdp(), "status", "--job", cluster.job(), "--redis", cluster.redis().url()});
    ASSERT_EQ(shown.exit_code, 0) << shown.err;
    EXPECT_NE(shown.out.find("validation: eval_loss " + state["eval_loss"] + " at step 24\n"), std::string::npos)
        << shown.out;
    std::string events;
    for (const auto& e : std::filesystem::directory_iterator(dir.path() / "tb")) {
      std::ifstream f(e.path(), std::ios::binary);
      events += std::string(std::istreambuf_iterator<char>(f), {});
    }
    EXPECT_NE(events.find("eval/loss"), std::string::npos) << "no eval/loss scalar in the TensorBoard events";
  }
  // A learning rate of 1e-12 (the flag takes > 0), far below the f32 resolution of weights of
  // ~0.02 (1e-9): the parameters stay, so the held-out loss of 2 and 4 ranks must agree to f32
  // summation order (the batch is planned and split differently on each world).
  std::map<int, std::map<std::int64_t, double>> by_world;
  for (int nproc : {2, 4}) {
    TempDir run;
    ClusterOptions o = quick(run.path(), {"--eval-data", eval_data, "--eval-every", "4", "--eval-tokens", "2000",
                                          "--lr", "1e-12", "--min-lr", "1e-12", "--steps", "8", "--metrics-file",
                                          (run.path() / "m.jsonl").string()});
    o.nproc = nproc;
    AgentCluster cluster(o);
    cluster.start_agent("n1");
    const auto status = cluster.agent("n1").wait_for(180s);
    ASSERT_TRUE(status.has_value() && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << cluster.all_logs();
    by_world[nproc] = eval_losses(run.path() / "m.jsonl");
  }
  ASSERT_EQ(by_world[2].size(), 2u);
  ASSERT_EQ(by_world[4].size(), 2u);
  for (std::int64_t step : {4, 8}) {
    const double a = by_world[2].at(step), b = by_world[4].at(step);
    std::printf("step %lld: eval_loss %.9f on 2 ranks, %.9f on 4\n", static_cast<long long>(step), a, b);
    EXPECT_NEAR(b / a, 1.0, 1e-6) << "step " << step;
  }
}

TEST(TrainerQuick, EvalFlagsWithoutTheirPartnerAreRefused) {
  TempDir dir;
  for (const auto& extra : std::vector<std::vector<std::string>>{{"--eval-every", "4"}, {"--eval-data", "synthetic:github"}}) {
    AgentCluster cluster(quick(dir.path(), extra));
    cluster.start_agent("n1");
    const auto status = cluster.agent("n1").wait_for(60s);
    ASSERT_TRUE(status.has_value()) << cluster.all_logs();
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 3) << cluster.all_logs();
    EXPECT_NE(cluster.all_logs().find(extra[0] == "--eval-every" ? "--eval-every needs --eval-data" : "--eval-data needs --eval-every"),
              std::string::npos)
        << cluster.all_logs();
  }
}

// Train -> export -> --init-from for each model family hdp reads: a job trained from a
// config.json of the family (a Llama 3.2-style one: llama3 RoPE scaling, tied, head_dim 24 on
// hidden 64, GQA; a Qwen2-style one: q/k/v biases, tied; a Mistral-style one: sliding_window null),
// exported in f32 and in bf16; a new job from each export starts from exactly the trained weights
// (f32) or those rounded to bf16 to nearest even (bf16), bit for bit (the restore event's xxh3);
// the export's config.json is the family's and a tied export has no lm_head.weight.
class FamilyRoundTrip : public ::testing::TestWithParam<std::string> {};

nlohmann::json family_config(const std::string& family) {
  nlohmann::json c = {{"vocab_size", 256},         {"hidden_size", 64},       {"intermediate_size", 128},
                      {"num_hidden_layers", 2},    {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                      {"rms_norm_eps", 1e-5},      {"hidden_act", "silu"},    {"rope_theta", 10000.0}};
  if (family == "llama") {
    c.update({{"model_type", "llama"}, {"head_dim", 24}, {"tie_word_embeddings", true},
              {"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                                {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 32}}}});
  } else if (family == "qwen2") {
    c.update({{"model_type", "qwen2"}, {"tie_word_embeddings", true}, {"use_sliding_window", false},
              {"sliding_window", 32768}});
  } else {
    c.update({{"model_type", "mistral"}, {"sliding_window", nullptr}, {"tie_word_embeddings", false}});
  }
  return c;
}

TEST_P(FamilyRoundTrip, AnExportStartsANewJobFromExactlyTheTrainedWeightsOrTheirBf16Rounding) {
  const std::string family = GetParam();
  TempDir dir;
  std::ofstream(dir.path() / "config.json") << family_config(family).dump();
  const std::vector<std::string> model = {"--model-config", (dir.path() / "config.json").string()};
  Final trained;
  {
    AgentCluster cluster(quick(dir.path(), model));
    cluster.start_agent("n1");
    const auto status = cluster.agent("n1").wait_for(180s);
    ASSERT_TRUE(status.has_value() && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << cluster.all_logs();
    trained = read_final(dir.path() / "ckpt");
  }
  ASSERT_EQ(trained.step, 24);
  const std::string hdp = std::string(std::getenv("HDP_BIN_DIR")) + "/hdp";
  for (const std::string dtype : {"f32", "bf16"}) {
    SCOPED_TRACE(dtype);
    const auto exported = dir.path() / ("export-" + dtype);
    const CommandResult r = run_command({hdp, "export", (dir.path() / "ckpt").string(), "--out", exported.string(), "--dtype", dtype});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::ifstream in(exported / "config.json");
    const nlohmann::json hf = nlohmann::json::parse(in, nullptr, false);
    EXPECT_EQ(hf.value("model_type", ""), family);
    const std::string weights = [&] {
      std::ifstream file(exported / "model.safetensors", std::ios::binary);
      return std::string(std::istreambuf_iterator<char>(file), {});
    }();
    EXPECT_EQ(weights.find("\"lm_head.weight\"") == std::string::npos, family != "mistral") << "tied exports have none";
    std::vector<float> expected = trained.params;
    if (dtype == "bf16") {
      for (float& x : expected) x = kernels::cpu::bf16_to_f32(kernels::cpu::f32_to_bf16(x));
    }
    expect_job_starts_from(exported, expected, {"--steps", "4"});
  }
}

INSTANTIATE_TEST_SUITE_P(Families, FamilyRoundTrip, ::testing::Values("llama", "qwen2", "mistral"));

}  // namespace
}  // namespace hdp::test
