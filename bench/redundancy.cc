// bench_redundancy: what redundant optimizer shards cost (hdp train --redundant-shards, a copy of
// every rank's AdamW shard on a rank of another node, kept equal every step). Two agents ("nodes")
// of 2 `hdp train` workers each (a private redis-server, real processes, 1 OpenMP thread a worker),
// the same job run four times in one run, alternately without and with copies (off, on, off, on):
//   step time    the median of rank 0's step times over steps --from..--steps, per run; the
//                overhead is median(on) / median(off) - 1, beside the spread of the two off runs;
//   memory       per rank, counted: exp_avg, exp_avg_sq, the received gradient and the parameters
//                of the shard it holds a copy of, the kept triple (parameters, exp_avg,
//                exp_avg_sq) before the last update of that copy and of its own shard
//                (10 x params / ranks x 4 bytes); measured: the workers' resident memory (VmRSS)
//                at the end of each run, mean over the 4 workers, on minus off;
//   network      per rank and step: its shard's gradient sent once to its holder
//                (params / ranks x 4 bytes), beside the reduce-scatter and all-gather
//                (2 x (ranks - 1) / ranks x params x 4 bytes).
//
// Usage: bench_redundancy [--json] [--steps 40] [--from 6] [--model demo]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "bench/ab_runs.h"
#include "bench/trainer_job.h"
#include "common/median.h"
#include "ops/model/llama_params.h"
#include "trainer/trainer_config.h"

namespace {

using namespace std::chrono_literals;

constexpr int kNodes = 2, kWorkersPerNode = 2, kRanks = kNodes * kWorkersPerNode;

// Each run's mean resident memory per worker (bytes), in run order.
std::vector<double> rss_off, rss_on;

double mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0 : sum / static_cast<double>(v.size());
}

// One run's median step (ms); 0 when it did not finish.
double run(const hdp::bench::AbSettings& s, bool copies, int index) {
  hdp::bench::Job job(s.hdp, 2000ms, "redundancy-" + std::to_string(index),
                      hdp::bench::ab_train_args(s, std::vector<std::string>{copies ? "--redundant-shards"
                                                                                           : "--no-redundant-shards"}));
  for (int n = 0; n < kNodes; ++n) job.start_agent("n" + std::to_string(n), kWorkersPerNode, std::to_string(kNodes));
  if (!job.wait([&](const auto& lines) { return !lines.empty() && lines.back().step >= s.steps; }, 900s)) {
    std::cerr << "bench_redundancy: run " << index << " did not finish\n";
    return 0;
  }
  double rss = 0;
  int workers = 0;
  for (int n = 0; n < kNodes; ++n) {
    for (pid_t pid : job.workers("n" + std::to_string(n))) {
      std::ifstream status("/proc/" + std::to_string(pid) + "/status");
      for (std::string line; std::getline(status, line);) {
        if (line.rfind("VmRSS:", 0) == 0) {
          rss += std::stod(line.substr(6)) * 1024;
          ++workers;
        }
      }
    }
  }
  (copies ? rss_on : rss_off).push_back(workers > 0 ? rss / workers : 0);
  return hdp::bench::median_step_ms(hdp::bench::read_lines(job.metrics()), s.from);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_redundancy: the step time with redundant optimizer shards beside without"};
  hdp::bench::AbSettings s;
  s.model = "demo";
  s.batch_tokens = 4096;
  s.steps = 40;
  s.from = 6;
  hdp::bench::add_ab_options(app, s, argv[0], 10);
  CLI11_PARSE(app, argc, argv);
  const auto result = hdp::bench::run_alternating([&](bool on, int index) { return run(s, on, index); });
  const double params = static_cast<double>(hdp::ops::model::param_count(hdp::trainer::model_preset(s.model)));
  const double shard_bytes = params / kRanks * 4;
  nlohmann::json out = result.json();
  out.update({{"model", s.model},
              {"params", params},
              {"ranks", kRanks},
              {"nodes", kNodes},
              {"counted_steps", {s.from, s.steps}},
              {"memory_bytes_per_rank", 10 * shard_bytes},
              {"rss_bytes_per_worker_off", rss_off},
              {"rss_bytes_per_worker_on", rss_on},
              {"rss_bytes_more_per_worker", mean(rss_on) - mean(rss_off)},
              {"sent_bytes_per_rank_step", shard_bytes},
              {"zero_bytes_per_rank_step", 2.0 * (kRanks - 1) / kRanks * params * 4}});
  if (s.json) {
    std::cout << out.dump(2) << "\n";
  } else {
    std::printf("model %s (%.0f parameters), %d nodes x %d workers, steps %d-%d counted; runs off, on, off, on\n",
                s.model.c_str(), params, kNodes, kWorkersPerNode, s.from, s.steps);
    std::printf("%s\n", result.line().c_str());
    std::printf("per rank: %.1f MiB more memory counted, %.1f MiB more resident measured (%.1f MiB without); %.2f MiB "
                "more sent per step, beside %.2f MiB of reduce-scatter + all-gather\n",
                10 * shard_bytes / (1 << 20), (mean(rss_on) - mean(rss_off)) / (1 << 20), mean(rss_off) / (1 << 20),
                shard_bytes / (1 << 20), out["zero_bytes_per_rank_step"].get<double>() / (1 << 20));
  }
  return result.ok ? 0 : 1;
}
