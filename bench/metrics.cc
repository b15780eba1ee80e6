// bench_metrics: what Prometheus metrics cost. One agent with 2 `hdp train` workers (the tiny
// model, a private redis-server, real processes), the same job run four times in one run,
// alternately without and with --metrics-port (off, on, off, on: drift of a shared machine falls
// on both alike):
//   step time   the median of rank 0's step times over steps --from..--steps, each run; the
//               overhead is median(on) / median(off) - 1, beside the run-to-run spread of the two
//               off runs (a difference below that spread is not measurable here);
//   scrape      during each run with metrics, --scrapes GETs of /metrics, 20 ms apart, each timed
//               from connect to the last byte (loopback): median, p99, max and the body's size.
//
// Usage: bench_metrics [--json] [--steps 60] [--from 11] [--scrapes 200] [--model tiny]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "agents/embedded_redis.h"
#include "bench/trainer_job.h"
#include "common/median.h"
#include "metrics/http_client.h"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

struct Settings {
  std::string model = "tiny";
  std::int64_t context = 512;
  std::int64_t batch_tokens = 8192;
  int steps = 60;
  int from = 11;
  int scrapes = 200;
};

struct Run {
  bool metrics = false;
  double median_step_ms = 0;
  std::vector<double> scrape_ms;
  std::size_t scrape_bytes = 0;
  bool ok = false;
};

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const auto i = static_cast<std::size_t>(p * static_cast<double>(values.size() - 1) + 0.5);
  return values[std::min(i, values.size() - 1)];
}

Run run(const Settings& s, const std::string& hdp, bool metrics, int index) {
  Run r{.metrics = metrics};
  const std::vector<std::string> train = {"--model", s.model, "--steps", std::to_string(s.steps), "--context",
                                          std::to_string(s.context), "--capacity", std::to_string(s.context),
                                          "--batch-tokens", std::to_string(s.batch_tokens), "--data",
                                          "synthetic:github", "--checkpoint-every", "1000000", "--threads", "1",
                                          "--log-every", "1000000"};
  hdp::bench::Job job(hdp, 2000ms, "metrics-" + std::to_string(index), train);
  const int port = hdp::agents::free_loopback_port();
  std::vector<std::string> flags;
  if (metrics) flags = {"--metrics-port", std::to_string(port), "--metrics-address", "127.0.0.1"};
  job.start_agent("a", 2, "1:1", flags);
  if (metrics) {
    // Scrape while the job trains (from the first counted step on), as Prometheus would.
    job.wait([&](const auto& lines) { return !lines.empty() && lines.back().step >= s.from; }, 300s);
    for (int i = 0; i < s.scrapes; ++i) {
      const auto started = std::chrono::steady_clock::now();
      const auto reply = hdp::metrics::http_get(port, "/metrics", 5s);
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
      if (reply.status != 200 || reply.body.find("hdp_train_step{") == std::string::npos) continue;
      r.scrape_ms.push_back(ms);
      r.scrape_bytes = reply.body.size();
      std::this_thread::sleep_for(20ms);
    }
  }
  if (!job.wait([&](const auto& lines) { return !lines.empty() && lines.back().step >= s.steps; }, 900s)) {
    std::cerr << "bench_metrics: run " << index << " did not finish\n";
    return r;
  }
  r.median_step_ms = hdp::bench::median_step_ms(hdp::bench::read_lines(job.metrics()), s.from);
  r.ok = r.median_step_ms > 0 && (!metrics || !r.scrape_ms.empty());
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_metrics: the step time with Prometheus metrics on beside off, and the time of a scrape"};
  Settings s;
  bool json = false;
  std::string hdp = (fs::path(argv[0]).parent_path() / "hdp").string();
  app.add_flag("--json", json, "One JSON object");
  app.add_option("--steps", s.steps, "Steps per run")->check(CLI::Range(20, 100000))->capture_default_str();
  app.add_option("--from", s.from, "First step counted")->check(CLI::Range(2, 100000))->capture_default_str();
  app.add_option("--scrapes", s.scrapes, "Scrapes per run with metrics")->check(CLI::Range(1, 100000))->capture_default_str();
  app.add_option("--model", s.model, "tiny, demo, small")->capture_default_str();
  app.add_option("--context", s.context, "Context and per-rank capacity")->capture_default_str();
  app.add_option("--batch-tokens", s.batch_tokens, "Global batch per step")->capture_default_str();
  app.add_option("--hdp", hdp, "The hdp binary")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (s.from >= s.steps) {
    std::cerr << "bench_metrics: --from must be below --steps\n";
    return 2;
  }
  std::vector<Run> runs;
  for (int i = 0; i < 4; ++i) runs.push_back(run(s, hdp, i % 2 == 1, i));
  bool ok = std::all_of(runs.begin(), runs.end(), [](const Run& r) { return r.ok; });
  const double off = (runs[0].median_step_ms + runs[2].median_step_ms) / 2;
  const double on = (runs[1].median_step_ms + runs[3].median_step_ms) / 2;
  const double spread = off > 0 ? std::abs(runs[0].median_step_ms - runs[2].median_step_ms) / off : 0;
  std::vector<double> scrapes = runs[1].scrape_ms;
  scrapes.insert(scrapes.end(), runs[3].scrape_ms.begin(), runs[3].scrape_ms.end());
  nlohmann::json out = {{"model", s.model},
                        {"workers", 2},
                        {"counted_steps", {s.from, s.steps}},
                        {"step_ms_off", {runs[0].median_step_ms, runs[2].median_step_ms}},
                        {"step_ms_on", {runs[1].median_step_ms, runs[3].median_step_ms}},
                        {"step_overhead", off > 0 ? on / off - 1 : 0},
                        {"off_run_spread", spread},
                        {"scrapes", scrapes.size()},
                        {"scrape_ms_median", percentile(scrapes, 0.5)},
                        {"scrape_ms_p99", percentile(scrapes, 0.99)},
                        {"scrape_ms_max", scrapes.empty() ? 0 : *std::max_element(scrapes.begin(), scrapes.end())},
                        {"scrape_bytes", runs[3].scrape_bytes}};
  if (json) {
    std::cout << out.dump(2) << "\n";
  } else {
    std::printf("model %s, 2 workers, steps %d-%d counted; runs off, on, off, on\n", s.model.c_str(), s.from, s.steps);
    std::printf("median step: off %.2f / %.2f ms, on %.2f / %.2f ms: overhead %+.1f%% (the two off runs differ by %.1f%%)\n",
                runs[0].median_step_ms, runs[2].median_step_ms, runs[1].median_step_ms, runs[3].median_step_ms,
                100 * (off > 0 ? on / off - 1 : 0), 100 * spread);
    std::printf("scrape of /metrics (%zu bytes): median %.2f ms, p99 %.2f ms, max %.2f ms over %zu scrapes\n",
                runs[3].scrape_bytes, percentile(scrapes, 0.5), percentile(scrapes, 0.99),
                out["scrape_ms_max"].get<double>(), scrapes.size());
  }
  return ok ? 0 : 1;
}
