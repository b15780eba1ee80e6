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
#include "bench/ab_runs.h"
#include "bench/trainer_job.h"
#include "common/median.h"
#include "metrics/http_client.h"

namespace {

using namespace std::chrono_literals;

struct Run {
  double median_step_ms = 0;
  std::vector<double> scrape_ms;
  std::size_t scrape_bytes = 0;
};

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const auto i = static_cast<std::size_t>(p * static_cast<double>(values.size() - 1) + 0.5);
  return values[std::min(i, values.size() - 1)];
}

// One run, with --metrics-port when `metrics`; scrapes while it trains (from the first counted
// step on), as Prometheus would. A run with metrics whose scrapes all failed counts as failed.
Run run(const hdp::bench::AbSettings& s, int scrapes, bool metrics, int index) {
  Run r;
  hdp::bench::Job job(s.hdp, 2000ms, "metrics-" + std::to_string(index), hdp::bench::ab_train_args(s));
  const int port = hdp::agents::free_loopback_port();
  std::vector<std::string> flags;
  if (metrics) flags = {"--metrics-port", std::to_string(port), "--metrics-address", "127.0.0.1"};
  job.start_agent("a", 2, "1:1", flags);
  if (metrics) {
    job.wait([&](const auto& lines) { return !lines.empty() && lines.back().step >= s.from; }, 300s);
    for (int i = 0; i < scrapes; ++i) {
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
  if (!metrics || !r.scrape_ms.empty()) {
    r.median_step_ms = hdp::bench::median_step_ms(hdp::bench::read_lines(job.metrics()), s.from);
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_metrics: the step time with Prometheus metrics on beside off, and the time of a scrape"};
  hdp::bench::AbSettings s;
  int scrapes = 200;
  hdp::bench::add_ab_options(app, s, argv[0], 20);
  app.add_option("--scrapes", scrapes, "Scrapes per run with metrics")->check(CLI::Range(1, 100000))->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  std::vector<double> scrape_ms;
  std::size_t scrape_bytes = 0;
  const auto result = hdp::bench::run_alternating([&](bool on, int index) {
    Run r = run(s, scrapes, on, index);
    scrape_ms.insert(scrape_ms.end(), r.scrape_ms.begin(), r.scrape_ms.end());
    if (r.scrape_bytes) scrape_bytes = r.scrape_bytes;
    return r.median_step_ms;
  });
  const double max = scrape_ms.empty() ? 0 : *std::max_element(scrape_ms.begin(), scrape_ms.end());
  nlohmann::json out = result.json();
  out.update({{"model", s.model},
              {"workers", 2},
              {"counted_steps", {s.from, s.steps}},
              {"scrapes", scrape_ms.size()},
              {"scrape_ms_median", percentile(scrape_ms, 0.5)},
              {"scrape_ms_p99", percentile(scrape_ms, 0.99)},
              {"scrape_ms_max", max},
              {"scrape_bytes", scrape_bytes}});
  if (s.json) {
    std::cout << out.dump(2) << "\n";
  } else {
    std::printf("model %s, 2 workers, steps %d-%d counted; runs off, on, off, on\n", s.model.c_str(), s.from, s.steps);
    std::printf("%s\n", result.line().c_str());
    std::printf("scrape of /metrics (%zu bytes): median %.2f ms, p99 %.2f ms, max %.2f ms over %zu scrapes\n",
                scrape_bytes, percentile(scrape_ms, 0.5), percentile(scrape_ms, 0.99), max, scrape_ms.size());
  }
  return result.ok ? 0 : 1;
}
