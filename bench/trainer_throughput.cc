// bench_trainer: tokens/s of the elastic trainer on this machine at 1, 2 and 4 workers (one
// agent, a private redis-server, real `hdp train` processes), beside the baseline measured in the
// same run: one process running LlamaModel forward + backward + AdamW over the same global batches
// packed whole, with all of the machine's cores. The ratio is what the trainer and the data plane
// cost (planning, per-rank batches, ring attention, ZeRO-1 over TCP, reporting, checkpoints off).
//
// Usage: bench_trainer [--json] [--workers 1,2,4] [--steps 14] [--model demo] [--context 512]
//                      [--batch-tokens 4096] [--data /usr/include]
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <omp.h>

#include "bench/trainer_job.h"
#include "common/median.h"
#include "ops/adamw.h"
#include "ops/model/llama_model.h"
#include "trainer/data/batch_source.h"
#include "trainer/trainer_config.h"
#include "trainer/training_setup.h"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

struct Settings {
  std::string model = "demo";
  std::int64_t context = 512;
  std::int64_t batch_tokens = 4096;
  int steps = 14;
  int warmup = 4;  // steps left out of the median (first touches, the OpenMP team)
  std::string data = "/usr/include";
  std::uint64_t seed = 1234;
};

// The baseline: tokens/s of one process over the same batches, every core.
double single_process(const Settings& s) {
  hdp::trainer::TrainerConfig config;
  config.model = hdp::trainer::model_preset(s.model);
  config.context = s.context;
  config.data = s.data;
  config.seed = s.seed;
  hdp::trainer::data::BatchSource source(hdp::trainer::open_data(config), s.seed);
  hdp::ops::model::LlamaModel model(config.model);
  model.init(s.seed);
  const auto m = hdp::ops::Tensor::zeros(model.params().shape(), hdp::ops::DType::kF32);
  const auto v = hdp::ops::Tensor::zeros(model.params().shape(), hdp::ops::DType::kF32);
  omp_set_num_threads(static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN))));
  hdp::checkpoint::DataPosition position;
  std::vector<double> seconds;
  for (int step = 1; step <= s.steps; ++step) {
    const auto batch = source.next(position, s.batch_tokens);
    const auto start = std::chrono::steady_clock::now();
    const auto packed = hdp::ops::model::pack_documents(batch.sequences);
    std::int64_t targets = 0;
    for (const auto& seq : batch.sequences) targets += std::max<std::int64_t>(0, static_cast<std::int64_t>(seq.size()) - 1);
    model.zero_grad();
    model.forward(packed);
    model.backward(1.0 / static_cast<double>(targets));
    const double norm = std::sqrt(hdp::ops::sum_squares(model.grads()));
    hdp::ops::adamw_step(model.params(), model.grads(), m, v, {.lr = 1e-3f, .weight_decay = 0.1f, .step = step}, norm,
                         1.0);
    if (step > s.warmup) seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return static_cast<double>(s.batch_tokens) / hdp::median(seconds);
}

// The trainer on `workers` workers of one agent: the median tokens/s rank 0 reported.
double trainer(const Settings& s, const std::string& hdp, int workers) {
  const long cores = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
  hdp::bench::Job job(hdp, 2000ms, "throughput-" + std::to_string(workers),
                      {"--model", s.model, "--steps", std::to_string(s.steps), "--context", std::to_string(s.context),
                       "--capacity", std::to_string(s.context), "--batch-tokens", std::to_string(s.batch_tokens),
                       "--data", s.data, "--seed", std::to_string(s.seed), "--checkpoint-every", "1000000",
                       "--threads", std::to_string(std::max(1L, cores / workers)), "--log-every", "1000000"});
  job.start_agent("a", workers, "1:1");
  if (!job.wait([&](const auto& lines) { return !lines.empty() && lines.back().step >= s.steps; }, 600s)) {
    std::cerr << "bench_trainer: the job on " << workers << " worker(s) did not finish\n";
    return 0;
  }
  std::vector<double> rates;
  for (const auto& line : hdp::bench::read_lines(job.metrics())) {
    if (line.step > s.warmup) rates.push_back(line.tokens_per_s);
  }
  return hdp::median(rates);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_trainer: the trainer's tokens/s at 1, 2, 4 workers beside one process's step"};
  Settings s;
  bool json = false;
  std::vector<int> workers = {1, 2, 4};
  std::string hdp = (fs::path(argv[0]).parent_path() / "hdp").string();
  app.add_flag("--json", json, "One JSON object");
  app.add_option("--workers", workers, "Worker counts")->delimiter(',')->capture_default_str();
  app.add_option("--steps", s.steps, "Steps per run (the first 4 are left out)")->check(CLI::Range(6, 100000));
  app.add_option("--model", s.model, "tiny, demo, small")->capture_default_str();
  app.add_option("--context", s.context, "Context and per-rank capacity C")->capture_default_str();
  app.add_option("--batch-tokens", s.batch_tokens, "Global batch per step")->capture_default_str();
  app.add_option("--data", s.data, "Corpus directory or synthetic:NAME")->capture_default_str();
  app.add_option("--hdp", hdp, "The hdp binary")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  const double baseline = single_process(s);
  nlohmann::json out = {{"model", s.model},
                        {"context", s.context},
                        {"batch_tokens", s.batch_tokens},
                        {"single_process_tokens_per_s", baseline},
                        {"runs", nlohmann::json::array()}};
  if (!json) {
    std::printf("model %s, context %lld, %lld tokens per step; baseline: one process, %ld thread(s): %.0f tokens/s\n",
                s.model.c_str(), static_cast<long long>(s.context), static_cast<long long>(s.batch_tokens),
                std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)), baseline);
    std::printf("%8s %14s %18s\n", "workers", "tokens/s", "ratio to baseline");
  }
  bool ok = baseline > 0;
  for (int w : workers) {
    const double rate = trainer(s, hdp, w);
    ok = ok && rate > 0;
    out["runs"].push_back({{"workers", w}, {"tokens_per_s", rate}, {"ratio", rate / baseline}});
    if (!json) std::printf("%8d %14.0f %18.3f\n", w, rate, rate / baseline);
  }
  if (json) std::cout << out.dump(2) << "\n";
  return ok ? 0 : 1;
}
