// bench_redundancy: what redundant optimizer shards cost (hdp train --redundant-shards, a copy of
// every rank's AdamW shard on a rank of another node, kept equal every step). Two agents ("nodes")
// of 2 `hdp train` workers each (a private redis-server, real processes, 1 OpenMP thread a worker),
// the same job run four times in one run, alternately without and with copies (off, on, off, on):
//   step time    the median of rank 0's step times over steps --from..--steps, per run; the
//                overhead is median(on) / median(off) - 1, beside the spread of the two off runs;
//   memory       per rank: exp_avg, exp_avg_sq, the received gradient and a scratch buffer of the
//                shard it holds a copy of (4 x params / ranks x 4 bytes), from the model's size;
//   network      per rank and step: its shard's gradient sent once to its holder
//                (params / ranks x 4 bytes), beside the reduce-scatter and all-gather
//                (2 x (ranks - 1) / ranks x params x 4 bytes).
//
// Usage: bench_redundancy [--json] [--steps 40] [--from 6] [--model demo]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "bench/trainer_job.h"
#include "common/median.h"
#include "ops/model/llama_params.h"
#include "trainer/trainer_config.h"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr int kNodes = 2, kWorkersPerNode = 2, kRanks = kNodes * kWorkersPerNode;

struct Settings {
  std::string model = "demo";
  std::int64_t context = 512;
  std::int64_t batch_tokens = 4096;
  int steps = 40;
  int from = 6;
};

// The median step time (ms) of rank 0's steps from..steps; 0 when the run did not finish.
double run(const Settings& s, const std::string& hdp, bool copies, int index) {
  std::vector<std::string> train = {"--model", s.model, "--steps", std::to_string(s.steps), "--context",
                                    std::to_string(s.context), "--capacity", std::to_string(s.context),
                                    "--batch-tokens", std::to_string(s.batch_tokens), "--data", "synthetic:github",
                                    "--checkpoint-every", "1000000", "--threads", "1", "--log-every", "1000000"};
  if (copies) train.push_back("--redundant-shards");
  hdp::bench::Job job(hdp, 2000ms, "redundancy-" + std::to_string(index), train);
  for (int n = 0; n < kNodes; ++n) job.start_agent("n" + std::to_string(n), kWorkersPerNode, std::to_string(kNodes));
  if (!job.wait([&](const auto& lines) { return !lines.empty() && lines.back().step >= s.steps; }, 900s)) {
    std::cerr << "bench_redundancy: run " << index << " did not finish\n";
    return 0;
  }
  return hdp::bench::median_step_ms(hdp::bench::read_lines(job.metrics()), s.from);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_redundancy: the step time with redundant optimizer shards beside without"};
  Settings s;
  bool json = false;
  std::string hdp = (fs::path(argv[0]).parent_path() / "hdp").string();
  app.add_flag("--json", json, "One JSON object");
  app.add_option("--steps", s.steps, "Steps per run")->check(CLI::Range(10, 100000))->capture_default_str();
  app.add_option("--from", s.from, "First step counted")->check(CLI::Range(2, 100000))->capture_default_str();
  app.add_option("--model", s.model, "tiny, demo, small")->capture_default_str();
  app.add_option("--context", s.context, "Context and per-rank capacity")->capture_default_str();
  app.add_option("--batch-tokens", s.batch_tokens, "Global batch per step")->capture_default_str();
  app.add_option("--hdp", hdp, "The hdp binary")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (s.from >= s.steps) {
    std::cerr << "bench_redundancy: --from must be below --steps\n";
    return 2;
  }
  std::vector<double> step_ms;
  for (int i = 0; i < 4; ++i) step_ms.push_back(run(s, hdp, i % 2 == 1, i));
  const bool ok = std::all_of(step_ms.begin(), step_ms.end(), [](double ms) { return ms > 0; });
  const double off = (step_ms[0] + step_ms[2]) / 2, on = (step_ms[1] + step_ms[3]) / 2;
  const double params = static_cast<double>(hdp::ops::model::param_count(hdp::trainer::model_preset(s.model)));
  const double shard_bytes = params / kRanks * 4;
  nlohmann::json out = {{"model", s.model},
                        {"params", params},
                        {"ranks", kRanks},
                        {"nodes", kNodes},
                        {"counted_steps", {s.from, s.steps}},
                        {"step_ms_off", {step_ms[0], step_ms[2]}},
                        {"step_ms_on", {step_ms[1], step_ms[3]}},
                        {"step_overhead", off > 0 ? on / off - 1 : 0},
                        {"off_run_spread", off > 0 ? std::abs(step_ms[0] - step_ms[2]) / off : 0},
                        {"memory_bytes_per_rank", 4 * shard_bytes},
                        {"sent_bytes_per_rank_step", shard_bytes},
                        {"zero_bytes_per_rank_step", 2.0 * (kRanks - 1) / kRanks * params * 4}};
  if (json) {
    std::cout << out.dump(2) << "\n";
  } else {
    std::printf("model %s (%.0f parameters), %d nodes x %d workers, steps %d-%d counted; runs off, on, off, on\n",
                s.model.c_str(), params, kNodes, kWorkersPerNode, s.from, s.steps);
    std::printf("median step: off %.1f / %.1f ms, on %.1f / %.1f ms: overhead %+.1f%% (the off runs differ by %.1f%%)\n",
                step_ms[0], step_ms[2], step_ms[1], step_ms[3], 100 * out["step_overhead"].get<double>(),
                100 * out["off_run_spread"].get<double>());
    std::printf("per rank: %.1f MiB more memory; %.2f MiB more sent per step, beside %.2f MiB of reduce-scatter + all-gather\n",
                4 * shard_bytes / (1 << 20), shard_bytes / (1 << 20),
                out["zero_bytes_per_rank_step"].get<double>() / (1 << 20));
  }
  return ok ? 0 : 1;
}
