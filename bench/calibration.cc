// bench/calibration: does the calibrated cost model predict the real time of planned micro-batches?
//
// 1. Calibrates the cost model on this machine exactly as `hdp plan --calibrate --repeats 9` does
//    (the real LlamaModel, forward + backward, f32 on the CPU).
// 2. Draws a batch (--dist at context C, so every sequence fits one rank and every micro-batch is
//    local: the CPU data plane's rings do not exist yet), plans it with the balanced strategy over
//    --ranks equal ranks using the calibrated model, and checks the plan.
// 3. Runs that plan for --steps steps as the ranks would, one after another on this machine: each
//    step runs every rank's micro-batches in its queue's order (forward + backward, its sequences
//    packed as one Batch), after one untimed warm-up step. Each measured time is compared with two
//    predictions made before it ran:
//    - the calibrated file alone: the micro-batch's cost at speed 1;
//    - the cost over the rank's speed factor (mesh/speed_tracker.h) after the steps before, what
//      the planner is given from the second step on: one number per rank, so it can absorb the
//      machine running faster or slower than when it was calibrated, but not a wrong model shape.
//    The baseline of every figure is the measurement taken in the same run; the target is
//    15%.
//
//   bench_calibration [--ranks 4] [--micro-batches 6] [--dist github] [--seed 1] [--capacity 1024]
//                     [--repeats 9] [--steps 11] [--threads 1] [--clock wall|cpu]
//
// Defaults: single runs of one micro-batch on the shared development VM vary by up to about 25%
// around their median from one minute to the next, so 9 calibration rounds and 10 compared steps
// keep the medians and the speed factors from following that noise.
//                     [--d-model 256] [--layers 4] [--heads 4]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "common/error.h"
#include "mesh/calibration.h"
#include "mesh/length_distribution.h"
#include "mesh/plan.h"
#include "mesh/plan_check.h"
#include "mesh/speed_tracker.h"

namespace {

constexpr double kSpeedWeight = 0.5;  // how far one step moves a rank's speed (mesh/speed_tracker.h)

struct Options {
  std::int64_t ranks = 4;
  std::int64_t micro_batches = 6;  // per rank: the batch holds ranks × this × C tokens
  std::string dist = "github";
  std::uint64_t seed = 1;
  int steps = 11;
  hdp::mesh::CalibrationOptions calibration{.repeats = 9, .threads = 1};
};

Options parse(int argc, char** argv) {
  Options o;
  hdp::ops::model::LlamaConfig& m = o.calibration.model;
  for (int i = 1; i + 1 < argc; i += 2) {
    const char* flag = argv[i];
    const char* value = argv[i + 1];
    if (std::strcmp(flag, "--ranks") == 0) o.ranks = std::atoll(value);
    if (std::strcmp(flag, "--micro-batches") == 0) o.micro_batches = std::atoll(value);
    if (std::strcmp(flag, "--dist") == 0) o.dist = value;
    if (std::strcmp(flag, "--seed") == 0) o.seed = std::strtoull(value, nullptr, 10);
    if (std::strcmp(flag, "--steps") == 0) o.steps = std::atoi(value);
    if (std::strcmp(flag, "--capacity") == 0) o.calibration.capacity = std::atoll(value);
    if (std::strcmp(flag, "--repeats") == 0) o.calibration.repeats = std::atoi(value);
    if (std::strcmp(flag, "--threads") == 0) o.calibration.threads = std::atoi(value);
    if (std::strcmp(flag, "--clock") == 0) o.calibration.clock = hdp::mesh::parse_clock(value);
    if (std::strcmp(flag, "--d-model") == 0) m.d_model = std::atoi(value);
    if (std::strcmp(flag, "--layers") == 0) m.n_layers = std::atoi(value);
    if (std::strcmp(flag, "--heads") == 0) m.n_heads = m.n_kv_heads = std::atoi(value);
  }
  m.ffn_dim = 3 * m.d_model;  // the default model's ratio
  if (o.steps < 2) throw hdp::InvalidArgument("--steps must be >= 2: the speed factor needs a step before it");
  return o;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

struct Row {
  std::uint32_t rank = 0;
  std::uint32_t slot = 0;
  std::vector<std::int64_t> lengths;
  double cost_ms = 0;                 // the plan's duration: the calibrated cost at speed 1
  std::vector<double> measured_ms;    // one per step
  std::vector<double> tracked_ms;     // per step: cost / the rank's speed before that step
};

// Step 2: plans a batch drawn at context C with the calibrated model; one row per micro-batch, in
// rank order and each rank's queue order.
std::vector<Row> planned_micro_batches(const Options& o, const hdp::mesh::CostModel& cost) {
  const std::int64_t c = o.calibration.capacity;
  hdp::mesh::PlanRequest request;
  request.lengths =
      hdp::mesh::draw_batch(hdp::mesh::named_distribution(o.dist), c, o.ranks * o.micro_batches * c, o.seed);
  request.speeds.assign(static_cast<std::size_t>(o.ranks), 1.0);
  request.capacity = c;
  request.cost = cost;
  const hdp::mesh::Plan plan = hdp::mesh::make_plan(request, hdp::mesh::Strategy::kBalanced);
  hdp::mesh::verify_plan(request, plan);
  std::vector<Row> rows;
  for (std::uint32_t rank = 0; rank < plan.rank_queues.size(); ++rank) {
    for (std::uint32_t index : plan.rank_queues[rank]) {
      const hdp::mesh::MicroBatch& batch = plan.micro_batches[index];
      HDP_CHECK(batch.ranks.size() == 1, "no sequence is longer than C, so no micro-batch is a ring");
      Row row{.rank = rank, .slot = batch.slot, .cost_ms = batch.duration_ms};  // at speed 1: the cost
      for (std::uint32_t s : batch.sequences) row.lengths.push_back(request.lengths[s]);
      rows.push_back(std::move(row));
    }
  }
  std::printf("## 2. A planned batch: %s at context %lld, %zu sequences, balanced over %lld ranks, "
              "%zu micro-batches\n\n",
              o.dist.c_str(), static_cast<long long>(c), request.lengths.size(), static_cast<long long>(o.ranks),
              rows.size());
  return rows;
}

// Step 3: runs the plan step after step; each rank reports its step to the speed tracker, whose
// factors predict the next step.
void run_steps(const Options& o, std::vector<Row>& rows) {
  hdp::ops::model::LlamaModel model(o.calibration.model);
  model.init(1);
  std::vector<hdp::ops::model::Batch> batches;
  for (const Row& row : rows) {
    batches.push_back(hdp::mesh::packed_micro_batch(row.lengths, o.calibration.model.vocab_size));
  }
  for (const auto& batch : batches) hdp::mesh::time_forward_backward(model, batch, o.calibration.clock);  // warm-up

  const auto ranks = static_cast<std::size_t>(o.ranks);
  hdp::mesh::SpeedTracker tracker(ranks, kSpeedWeight);
  std::printf("| step | load average | speed factors before the step |\n|---|---|---|\n");
  for (int step = 0; step < o.steps; ++step) {
    std::printf("| %d | %.2f |", step + 1, hdp::mesh::load_average());
    for (double speed : tracker.speeds()) std::printf(" %.3f", speed);
    std::printf(" |\n");
    std::vector<double> planned(ranks, 0.0), measured(ranks, 0.0);
    for (std::size_t i = 0; i < rows.size(); ++i) {
      Row& row = rows[i];
      row.tracked_ms.push_back(row.cost_ms / tracker.speeds()[row.rank]);
      row.measured_ms.push_back(hdp::mesh::time_forward_backward(model, batches[i], o.calibration.clock));
      planned[row.rank] += row.cost_ms;
      measured[row.rank] += row.measured_ms.back();
    }
    for (std::size_t r = 0; r < ranks; ++r) tracker.report(r, planned[r], measured[r]);
  }
  std::printf("\n");
}

// |error| of a prediction, summarised per micro-batch and per rank's step (what the planner
// balances): the worst and the mean over micro-batches, and the worst over ranks.
struct Errors {
  double worst = 0;
  double mean = 0;
  double worst_rank = 0;
  double worst_single = 0;  // tracked only: the worst of every (micro-batch, step) pair
};

double relative_error(double predicted, double measured) { return predicted / measured - 1; }

// The calibrated file alone against each micro-batch's median over all steps.
Errors file_errors(const std::vector<Row>& rows, std::size_t ranks, std::vector<double>& per_row) {
  Errors e;
  std::vector<double> rank_cost(ranks, 0.0), rank_measured(ranks, 0.0);
  for (const Row& row : rows) {
    const double measured = median(row.measured_ms);
    per_row.push_back(relative_error(row.cost_ms, measured));
    e.worst = std::max(e.worst, std::abs(per_row.back()));
    e.mean += std::abs(per_row.back()) / static_cast<double>(rows.size());
    rank_cost[row.rank] += row.cost_ms;
    rank_measured[row.rank] += measured;
  }
  for (std::size_t r = 0; r < ranks; ++r) {
    e.worst_rank = std::max(e.worst_rank, std::abs(relative_error(rank_cost[r], rank_measured[r])));
  }
  return e;
}

// The tracked prediction against the same step's measurement, from step 2 on (step 1 has no speed
// yet); a micro-batch's error is its median over those steps, a rank's step likewise.
Errors tracked_errors(const std::vector<Row>& rows, std::size_t ranks, int steps, std::vector<double>& per_row) {
  Errors e;
  for (const Row& row : rows) {
    std::vector<double> errors;
    for (int k = 1; k < steps; ++k) {
      errors.push_back(relative_error(row.tracked_ms[k], row.measured_ms[k]));
      e.worst_single = std::max(e.worst_single, std::abs(errors.back()));
    }
    per_row.push_back(median(errors));
    e.worst = std::max(e.worst, std::abs(per_row.back()));
    e.mean += std::abs(per_row.back()) / static_cast<double>(rows.size());
  }
  for (std::size_t r = 0; r < ranks; ++r) {
    std::vector<double> step_errors;
    for (int k = 1; k < steps; ++k) {
      double predicted = 0, measured = 0;
      for (const Row& row : rows) {
        if (row.rank != r) continue;
        predicted += row.tracked_ms[k];
        measured += row.measured_ms[k];
      }
      step_errors.push_back(relative_error(predicted, measured));
    }
    e.worst_rank = std::max(e.worst_rank, std::abs(median(step_errors)));
  }
  return e;
}

void report(const Options& o, const std::vector<Row>& rows) {
  const auto ranks = static_cast<std::size_t>(o.ranks);
  std::vector<double> file_row, tracked_row;
  const Errors file = file_errors(rows, ranks, file_row);
  const Errors tracked = tracked_errors(rows, ranks, o.steps, tracked_row);
  std::printf("| rank | slot | sequences | tokens | measured ms (median, min-max) | calibrated ms (error) | "
              "with speed factor: median error |\n|---|---|---|---|---|---|---|\n");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Row& row = rows[i];
    const auto [low, high] = std::minmax_element(row.measured_ms.begin(), row.measured_ms.end());
    std::printf("| %u | %u | %zu | %lld | %.1f (%.1f-%.1f) | %.1f (%+.1f%%) | %+.1f%% |\n", row.rank, row.slot,
                row.lengths.size(),
                static_cast<long long>(std::accumulate(row.lengths.begin(), row.lengths.end(), std::int64_t{0})),
                median(row.measured_ms), *low, *high, row.cost_ms, 100 * file_row[i], 100 * tracked_row[i]);
  }
  std::printf("\n| prediction | max | mean | max over ranks' steps | worst single run |\n|---|---|---|---|---|\n"
              "| calibrated file alone (speed 1) | %.1f%% | %.1f%% | %.1f%% | |\n"
              "| with the rank's speed factor (steps 2-%d) | %.1f%% | %.1f%% | %.1f%% | %.1f%% |\n\n"
              "target 15%%; load average %.2f at the end\n",
              100 * file.worst, 100 * file.mean, 100 * file.worst_rank, o.steps, 100 * tracked.worst,
              100 * tracked.mean, 100 * tracked.worst_rank, 100 * tracked.worst_single, hdp::mesh::load_average());
}

void run(const Options& o) {
  const hdp::ops::model::LlamaConfig& m = o.calibration.model;
  std::printf("# bench_calibration: LlamaModel d_model %d, %d layers, %d heads, ffn %d (f32, CPU, %d thread(s)), "
              "C = %lld, calibration median of %d rounds, %d steps, %s clock; load average %.2f at start\n\n",
              m.d_model, m.n_layers, m.n_heads, m.ffn_dim, o.calibration.threads,
              static_cast<long long>(o.calibration.capacity), o.calibration.repeats, o.steps,
              hdp::mesh::clock_name(o.calibration.clock), hdp::mesh::load_average());
  const hdp::mesh::Calibration calibration = hdp::mesh::calibrate(o.calibration);
  double worst_fit = 0;
  for (double r : hdp::mesh::relative_residuals(calibration.cost, calibration.samples)) {
    worst_fit = std::max(worst_fit, std::abs(r));
  }
  std::printf("## 1. Calibration (%zu micro-batches, as hdp plan --calibrate)\n\nalpha %.6g ms/token^2, "
              "beta %.6g ms/token, gamma %.6g ms; fit residuals max |r| %.1f%%\n\n",
              calibration.samples.size(), calibration.cost.alpha_ms, calibration.cost.beta_ms,
              calibration.cost.gamma_ms, 100 * worst_fit);
  std::vector<Row> rows = planned_micro_batches(o, calibration.cost);
  std::printf("## 3. %d steps of the plan\n\n", o.steps);
  run_steps(o, rows);
  report(o, rows);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    run(parse(argc, argv));
  } catch (const hdp::Error& e) {
    std::fprintf(stderr, "bench_calibration: %s\n", e.what());
    return 2;
  }
  return 0;
}
