// File: bench/ab_runs.h
//
// The benchmarks that compare a trainer feature off and on (bench_metrics, bench_redundancy): the
// same job run four times, off, on, off, on, so that drift of a shared machine falls on both alike.
// Each run's figure is the median of rank 0's step times over steps --from..--steps; the overhead
// is mean(on) / mean(off) - 1, reported beside the spread of the two off runs (a difference below
// it is not measurable here).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace hdp::bench {

struct AbSettings {
  std::string model = "tiny";
  std::int64_t context = 512;
  std::int64_t batch_tokens = 8192;
  int steps = 60;
  int from = 11;
  std::string hdp;  // the hdp binary (default: beside the benchmark)
  bool json = false;
};

// --json, --steps (at least min_steps), --from, --model, --context, --batch-tokens, --hdp.
void add_ab_options(CLI::App& app, AbSettings& s, const char* argv0, int min_steps);
// `hdp train` flags of one run: synthetic documents, no checkpoint, 1 thread, no log lines; then `extra`.
std::vector<std::string> ab_train_args(const AbSettings& s, std::vector<std::string> extra = {});

struct AbResult {
  std::vector<double> off, on;  // each run's median step (ms), in run order
  bool ok = false;              // every run finished
  double overhead() const;      // mean(on) / mean(off) - 1
  double spread() const;        // |off[0] - off[1]| / mean(off)
  nlohmann::json json() const;  // step_ms_off, step_ms_on, step_overhead, off_run_spread
  std::string line() const;     // "median step: off a / b ms, on c / d ms: overhead ... (...)"
};

// Runs `run(on, index)` four times (off, on, off, on); it returns the run's median step (ms), 0
// when the run did not finish.
AbResult run_alternating(const std::function<double(bool on, int index)>& run);

}  // namespace hdp::bench
