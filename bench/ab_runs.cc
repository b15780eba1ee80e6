#include "bench/ab_runs.h"

#include <cmath>
#include <cstdio>
#include <filesystem>

namespace hdp::bench {

void add_ab_options(CLI::App& app, AbSettings& s, const char* argv0, int min_steps) {
  s.hdp = (std::filesystem::path(argv0).parent_path() / "hdp").string();
  app.add_flag("--json", s.json, "One JSON object");
  app.add_option("--steps", s.steps, "Steps per run")->check(CLI::Range(min_steps, 100000))->capture_default_str();
  app.add_option("--from", s.from, "First step counted")->check(CLI::Range(2, 100000))->capture_default_str();
  app.add_option("--model", s.model, "tiny, demo, small")->capture_default_str();
  app.add_option("--context", s.context, "Context and per-rank capacity")->capture_default_str();
  app.add_option("--batch-tokens", s.batch_tokens, "Global batch per step")->capture_default_str();
  app.add_option("--hdp", s.hdp, "The hdp binary")->capture_default_str();
  app.callback([&s] {
    if (s.from >= s.steps) throw CLI::ValidationError("--from", "must be below --steps");
  });
}

std::vector<std::string> ab_train_args(const AbSettings& s, std::vector<std::string> extra) {
  std::vector<std::string> args = {"--model", s.model, "--steps", std::to_string(s.steps), "--context",
                                   std::to_string(s.context), "--capacity", std::to_string(s.context),
                                   "--batch-tokens", std::to_string(s.batch_tokens), "--data", "synthetic:github",
                                   "--checkpoint-every", "1000000", "--threads", "1", "--log-every", "1000000"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

double AbResult::overhead() const {
  const double o = (off[0] + off[1]) / 2;
  return o > 0 ? (on[0] + on[1]) / 2 / o - 1 : 0;
}

double AbResult::spread() const {
  const double o = (off[0] + off[1]) / 2;
  return o > 0 ? std::abs(off[0] - off[1]) / o : 0;
}

nlohmann::json AbResult::json() const {
  return {{"step_ms_off", off}, {"step_ms_on", on}, {"step_overhead", overhead()}, {"off_run_spread", spread()}};
}

std::string AbResult::line() const {
  char text[256];
  std::snprintf(text, sizeof text,
                "median step: off %.2f / %.2f ms, on %.2f / %.2f ms: overhead %+.1f%% (the two off runs differ by %.1f%%)",
                off[0], off[1], on[0], on[1], 100 * overhead(), 100 * spread());
  return text;
}

AbResult run_alternating(const std::function<double(bool on, int index)>& run) {
  AbResult r;
  r.ok = true;
  for (int i = 0; i < 4; ++i) {
    const bool on = i % 2 == 1;
    const double ms = run(on, i);
    r.ok = r.ok && ms > 0;
    (on ? r.on : r.off).push_back(ms);
  }
  return r;
}

}  // namespace hdp::bench
