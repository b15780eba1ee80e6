#include "cli/plan_calibration.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "mesh/plan/cost_model_json.h"

namespace hdp::cli {
namespace {

void print(const mesh::Calibration& c) {
  const nlohmann::json& machine = c.record["machine"];
  std::printf("calibrated %s on %s, %d thread(s): C = %lld tokens, median of %d rounds on the %s clock, "
              "load average %.2f -> %.2f\n",
              c.cost.name.c_str(), machine["cpu"].get<std::string>().c_str(), machine["threads"].get<int>(),
              static_cast<long long>(c.record["capacity"].get<std::int64_t>()), c.record["repeats"].get<int>(),
              c.record["clock"].get<std::string>().c_str(), machine["load_average"][0].get<double>(),
              machine["load_average"][1].get<double>());
  std::printf("alpha  %.6g ms per token^2 of a sequence\n", c.cost.alpha_ms);
  std::printf("beta   %.6g ms per token\n", c.cost.beta_ms);
  std::printf("gamma  %.6g ms per micro-batch\n\n", c.cost.gamma_ms);
  std::printf("%9s %8s %12s %12s %9s\n", "sequences", "tokens", "measured ms", "fitted ms", "residual");
  const std::vector<double> residuals = mesh::relative_residuals(c.cost, c.samples);
  double worst = 0;
  double squares = 0;
  for (std::size_t i = 0; i < c.samples.size(); ++i) {
    const auto& lengths = c.samples[i].lengths;
    std::printf("%9zu %8lld %12.3f %12.3f %+8.1f%%\n", lengths.size(),
                static_cast<long long>(std::accumulate(lengths.begin(), lengths.end(), std::int64_t{0})),
                c.samples[i].measured_ms, c.cost.micro_batch_ms(lengths, 1), 100 * residuals[i]);
    worst = std::max(worst, std::abs(residuals[i]));
    squares += residuals[i] * residuals[i];
  }
  std::printf("\nresiduals (fitted / measured - 1): max |r| %.1f%%, rms %.1f%% over %zu micro-batches\n", 100 * worst,
              100 * std::sqrt(squares / static_cast<double>(residuals.size())), residuals.size());
}

}  // namespace

CLI::Option* add_calibrate_options(CLI::App& command, CalibrateOptions& o) {
  ops::model::LlamaConfig& m = o.calibration.model;
  CLI::Option* flag = command.add_flag(
      "--calibrate", o.calibrate, "Fit the cost model on this machine by timing the model (forward + backward, CPU)");
  command.add_option("--out", o.out, "--calibrate: write the fitted cost model to this JSON file")->needs(flag);
  command.add_option("--d-model", m.d_model, "--calibrate: model width")->capture_default_str()->needs(flag);
  command.add_option("--layers", m.n_layers, "--calibrate: decoder layers")->capture_default_str()->needs(flag);
  command.add_option("--heads", m.n_heads, "--calibrate: attention heads")->capture_default_str()->needs(flag);
  command.add_option("--kv-heads", m.n_kv_heads, "--calibrate: key/value heads")->capture_default_str()->needs(flag);
  command.add_option("--ffn-dim", m.ffn_dim, "--calibrate: MLP width")->capture_default_str()->needs(flag);
  command.add_option("--vocab", m.vocab_size, "--calibrate: vocabulary size")->capture_default_str()->needs(flag);
  command.add_option("--repeats", o.calibration.repeats, "--calibrate: timed rounds (the median is kept)")
      ->capture_default_str()
      ->needs(flag);
  command.add_option("--threads", o.calibration.threads, "--calibrate: OpenMP threads (default: OpenMP's)")
      ->needs(flag);
  command.add_option("--clock", o.clock, "--calibrate: wall, or cpu (the thread's CPU time; needs --threads 1)")
      ->capture_default_str()
      ->needs(flag);
  return flag;
}

mesh::CostModel run_calibration(const CalibrateOptions& o) {
  mesh::CalibrationOptions options = o.calibration;
  options.clock = mesh::parse_clock(o.clock);
  const mesh::Calibration calibration = mesh::calibrate(options);
  print(calibration);
  if (!o.out.empty()) {
    mesh::save_cost_model(calibration.cost, o.out, calibration.record);
    std::printf("wrote %s\n", o.out.c_str());
  }
  return calibration.cost;
}

}  // namespace hdp::cli
