// `hdp plan`: plans one HDP step by simulation and prints its summary (docs/scheduler.md).
//
//   hdp plan --ranks 1024 --dist github --context 2097152 --tokens 33554432 --seed 7 --json
//   hdp plan --ranks 8 --lengths batch.txt --strategy naive --speed 3=0.5
//   hdp plan --save-cost-model cost.json [--link-gbps 50]
//   hdp plan --calibrate --out cpu.json [--capacity 1024 --d-model 256 --layers 4 --threads 1]
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/plan_calibration.h"
#include "common/error.h"
#include "mesh/plan/cost_model_json.h"
#include "mesh/plan/length_distribution.h"
#include "mesh/plan/plan.h"
#include "mesh/plan/plan_check.h"
#include "mesh/plan/plan_summary.h"

namespace hdp::cli {
namespace {

struct PlanOptions {
  std::int64_t ranks = 0;
  std::int64_t capacity = 8192;
  std::string dist;
  std::string lengths_file;
  std::int64_t context = 0;
  std::int64_t tokens = 0;
  std::uint64_t seed = 1;
  std::string strategy = "balanced";
  std::vector<std::string> speeds;  // RANK=FACTOR
  std::string cost_model_file;
  std::optional<double> link_gbps;  // unset: the model's own; a bad value is rejected where it is used
  bool offload = false;
  std::optional<double> delta_ms;  // unset: the planner's default
  std::string save_cost_model;
  bool json = false;
  CalibrateOptions calibrate;
};

mesh::CostModel cost_model(const PlanOptions& o) {
  if (o.calibrate.calibrate) {
    CalibrateOptions calibrate = o.calibrate;
    calibrate.calibration.capacity = o.capacity;
    if (o.link_gbps) calibrate.calibration.link_gbps = *o.link_gbps;
    return run_calibration(calibrate);
  }
  mesh::CostModel model = o.cost_model_file.empty() ? mesh::gpu_preset_7b() : mesh::load_cost_model(o.cost_model_file);
  if (o.link_gbps) model.link_gbps = *o.link_gbps;
  return model;
}

void apply_speeds(const std::vector<std::string>& specs, std::vector<double>& speeds) {
  for (const std::string& spec : specs) {
    const auto eq = spec.find('=');
    std::size_t used_rank = 0, used_speed = 0;
    long long rank = -1;
    double speed = 0;
    try {
      rank = std::stoll(spec.substr(0, eq), &used_rank);
      speed = std::stod(spec.substr(eq + 1), &used_speed);
    } catch (const std::exception&) {
      used_rank = 0;
    }
    if (eq == std::string::npos || used_rank != eq || used_speed != spec.size() - eq - 1) {
      throw InvalidArgument("--speed '" + spec + "' must be RANK=FACTOR, e.g. 3=0.5");
    }
    if (rank < 0 || rank >= static_cast<long long>(speeds.size())) {
      throw InvalidArgument("--speed '" + spec + "': rank must be in [0, " + std::to_string(speeds.size()) + ")");
    }
    speeds[static_cast<std::size_t>(rank)] = speed;  // validate_request rejects 0, negative, NaN
  }
}

std::vector<std::int64_t> batch(const PlanOptions& o) {
  if (o.dist.empty() == o.lengths_file.empty()) {
    throw InvalidArgument("give exactly one of --dist NAME (with --context and --tokens) or --lengths FILE");
  }
  if (!o.lengths_file.empty()) return mesh::read_lengths(o.lengths_file);
  if (o.context < 1 || o.tokens < 1) throw InvalidArgument("--dist needs --context >= 1 and --tokens >= 1");
  return mesh::draw_batch(mesh::named_distribution(o.dist), o.context, o.tokens, o.seed);
}

nlohmann::json spread_json(const mesh::Spread& s) { return {{"min", s.min}, {"mean", s.mean}, {"max", s.max}}; }

std::string hex(std::uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

void print(const PlanOptions& o, const mesh::PlanRequest& request, const mesh::PlanSummary& s) {
  if (o.json) {
    const nlohmann::json out = {{"strategy", o.strategy},
                                {"ranks", request.speeds.size()},
                                {"capacity", request.capacity},
                                {"sequences", s.sequences},
                                {"tokens", s.tokens},
                                {"cost_model", request.cost.name},
                                {"time_unit", "ms"},
                                {"makespan", s.makespan_ms},
                                {"bound", s.bound.bound_ms()},
                                {"work_bound", s.bound.work_ms},
                                {"sequence_bound", s.bound.sequence_ms},
                                {"imbalance", s.imbalance},
                                {"sharded_sequences", s.sharded_sequences},
                                {"ranks_per_sharded_sequence", spread_json(s.ranks_per_sharded)},
                                {"micro_batches_per_rank", spread_json(s.micro_batches_per_rank)},
                                {"ring_bytes", s.ring_bytes},
                                {"digest", hex(s.digest)}};
    std::cout << out.dump(2) << "\n";
    return;
  }
  std::printf("strategy %s: %zu ranks, C = %lld tokens, %lld sequences, %lld tokens, cost model %s\n",
              o.strategy.c_str(), request.speeds.size(), static_cast<long long>(request.capacity),
              static_cast<long long>(s.sequences), static_cast<long long>(s.tokens), request.cost.name.c_str());
  std::printf("makespan       %.3f s\n", s.makespan_ms / 1e3);
  std::printf("lower bound    %.3f s (work %.3f s, longest sequence %.3f s)\n", s.bound.bound_ms() / 1e3,
              s.bound.work_ms / 1e3, s.bound.sequence_ms / 1e3);
  std::printf("imbalance      %.3f (makespan / lower bound)\n", s.imbalance);
  std::printf("sharded        %lld sequences over %.0f..%.0f ranks (mean %.1f)\n",
              static_cast<long long>(s.sharded_sequences), s.ranks_per_sharded.min, s.ranks_per_sharded.max,
              s.ranks_per_sharded.mean);
  std::printf("micro-batches  %.0f..%.0f per rank (mean %.2f)\n", s.micro_batches_per_rank.min,
              s.micro_batches_per_rank.max, s.micro_batches_per_rank.mean);
  std::printf("ring traffic   %.3f GB\n", s.ring_bytes / 1e9);
  std::printf("plan digest    %s\n", hex(s.digest).c_str());
}

void run_plan(const PlanOptions& o) {
  const mesh::CostModel model = cost_model(o);
  if (!o.save_cost_model.empty()) mesh::save_cost_model(model, o.save_cost_model);
  if ((o.calibrate.calibrate || !o.save_cost_model.empty()) && o.dist.empty() && o.lengths_file.empty()) return;
  if (o.ranks < 1) throw InvalidArgument("--ranks must be >= 1");
  mesh::PlanRequest request;
  request.lengths = batch(o);
  request.speeds.assign(static_cast<std::size_t>(o.ranks), 1.0);
  apply_speeds(o.speeds, request.speeds);
  request.capacity = o.capacity;
  request.context = o.context;
  request.offload = o.offload;
  request.delta_ms = o.delta_ms;
  request.cost = model;
  const mesh::Plan plan = mesh::make_plan(request, mesh::parse_strategy(o.strategy));
  mesh::verify_plan(request, plan);
  print(o, request, mesh::summarize(request, plan));
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto o = std::make_shared<PlanOptions>();
  CLI::App* command =
      app.add_subcommand("plan", "Plan one HDP step by simulation and print makespan, bound, imbalance");
  command->add_option("--ranks", o->ranks, "Live ranks");
  CLI::Option* capacity =
      command->add_option("--capacity", o->capacity, "Tokens per rank per micro-batch (C); 1024 with --calibrate")
          ->capture_default_str();
  command->add_option("--dist", o->dist, "Length distribution: github, byted or file:PATH");
  command->add_option("--lengths", o->lengths_file, "The batch: a file of lengths (white space separated, # comments)");
  command->add_option("--context", o->context, "Context length: cuts drawn lengths, sizes the static CP group");
  command->add_option("--tokens", o->tokens, "Tokens in the drawn global batch");
  command->add_option("--seed", o->seed, "Seed of the drawn batch")->capture_default_str();
  command->add_option("--strategy", o->strategy, "static, naive or balanced")->capture_default_str();
  command->add_option("--speed", o->speeds, "RANK=FACTOR relative speed of a rank (repeatable; default 1)");
  CLI::Option* calibrate = add_calibrate_options(*command, o->calibrate);
  command->add_option("--cost-model", o->cost_model_file, "Cost model JSON file (default: the gpu-7b preset)")
      ->excludes(calibrate);
  command->add_option("--link-gbps", o->link_gbps, "Override the ring link bandwidth, GB/s");
  command->add_flag("--offload", o->offload, "Selective activation offloading (ByteScale Eq. 3) to lower D(s)");
  command->add_option("--delta-ms", o->delta_ms,
                      "Balanced: how much later a short sequence may end in room than in a new micro-batch, ms "
                      "(default 0)");
  command->add_option("--save-cost-model", o->save_cost_model, "Write the cost model in use to this JSON file")
      ->excludes(calibrate);
  command->add_flag("--json", o->json, "Print the summary as JSON (times in ms)");
  command->callback([o, capacity] {
    // C bounds the timed micro-batches; the GPU default of 8K tokens would take minutes on a CPU.
    if (o->calibrate.calibrate && capacity->count() == 0) o->capacity = mesh::CalibrationOptions{}.capacity;
    run_plan(*o);
  });
}

}  // namespace hdp::cli
