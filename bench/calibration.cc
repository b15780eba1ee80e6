// bench/calibration: does the calibrated cost model predict the real time of planned micro-batches?
//
// 1. Calibrates the cost model on this machine exactly as `hdp plan --calibrate --repeats 9
//    --threads 1` does (the real LlamaModel, forward + backward, f32 on the CPU): the file.
// 2. Draws one batch of each --dists at context C (so every sequence fits one rank and every
//    micro-batch is local: the CPU data plane's rings do not exist yet), plans each with the balanced
//    strategy over --ranks equal ranks using the file, and checks the plans. Their micro-batches are
//    the held-out set; nothing below is fitted to their times. Some have a shape the calibration
//    also times (one sequence of C tokens, the commonest); those are marked, and the target's
//    figures leave them out, since the fit has seen that shape.
// 3. Runs --rounds rounds. Every round runs the 12 calibration micro-batches and each held-out shape
//    once (a plan's many single sequences of C tokens are the same work, timed once), in a new
//    shuffled order (mesh::time_rounds). This machine's core changes speed by tens of per cent
//    within seconds (docs/performance.md), so only micro-batches timed in the same rounds can be
//    compared; a micro-batch's time is its median over the rounds, and the medians of the even and
//    of the odd rounds show how uncertain that is.
// 4. Compares every held-out shape's time with three predictions:
//    - the cost model refitted to the calibration micro-batches of these rounds (mesh::
//      fit_compute_cost, as calibrate() fits): the calibration's shape, without the machine's drift
//      since step 1. This is the target's figure: 15% on every shape the calibration does not time
//      (docs/performance.md);
//    - the file of step 1 alone, at speed 1: what drift between then and now adds;
//    - the file over one speed factor that a mesh::SpeedTracker takes from the calibration
//      micro-batches of these rounds (Σ cost / Σ measured): how the planner corrects that drift,
//      with the file's shape.
//    Each is also summed per rank over its planned micro-batches (a rank's step: what the planner
//    balances).
//
//   bench_calibration [--dists github,byted] [--seed 1] [--ranks 4] [--micro-batches 6]
//                     [--capacity 1024] [--repeats 9] [--rounds 40] [--threads 1] [--clock wall|cpu]
//                     [--d-model 256] [--layers 4] [--heads 4]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/error.h"
#include "common/median.h"
#include "mesh/plan/calibration.h"
#include "mesh/plan/cost_fit.h"
#include "mesh/plan/length_distribution.h"
#include "mesh/plan/plan.h"
#include "mesh/plan/plan_check.h"
#include "mesh/plan/speed_tracker.h"
#include "ops/host_memory.h"

namespace {

struct Options {
  std::vector<std::string> dists{"github", "byted"};
  std::uint64_t seed = 1;
  std::int64_t ranks = 4;
  std::int64_t micro_batches = 6;  // per rank: a batch holds ranks × this × C tokens
  int rounds = 40;
  hdp::mesh::CalibrationOptions calibration{.repeats = 9, .threads = 1};
};

// A planned micro-batch of a held-out batch: which batch, which rank, which shape (its sequences).
struct Planned {
  std::size_t batch = 0;
  std::uint32_t rank = 0;
  std::vector<std::int64_t> lengths;
};

// Held-out batch number `batch`, drawn from --dists[batch] at context C, planned (balanced) over
// equal ranks with the file and checked; its micro-batches in rank order and each rank's queue order.
std::vector<Planned> plan_batch(const Options& o, const hdp::mesh::CostModel& file, std::size_t batch) {
  const std::int64_t c = o.calibration.capacity;
  hdp::mesh::PlanRequest request;
  request.lengths = hdp::mesh::draw_batch(hdp::mesh::named_distribution(o.dists[batch]), c,
                                          o.ranks * o.micro_batches * c, o.seed);
  request.speeds.assign(static_cast<std::size_t>(o.ranks), 1.0);
  request.capacity = c;
  request.cost = file;
  const hdp::mesh::Plan plan = hdp::mesh::make_plan(request, hdp::mesh::Strategy::kBalanced);
  hdp::mesh::verify_plan(request, plan);
  std::vector<Planned> out;
  for (std::uint32_t rank = 0; rank < plan.rank_queues.size(); ++rank) {
    for (std::uint32_t index : plan.rank_queues[rank]) {
      const hdp::mesh::MicroBatch& micro_batch = plan.micro_batches[index];
      HDP_CHECK(micro_batch.ranks.size() == 1, "no sequence is longer than C, so no micro-batch is a ring");
      Planned planned{.batch = batch, .rank = rank};
      for (std::uint32_t s : micro_batch.sequences) planned.lengths.push_back(request.lengths[s]);
      out.push_back(std::move(planned));
    }
  }
  return out;
}

// The held-out set: every distinct shape the plans hold, timed once per round (a plan's many single
// sequences of C tokens are the same work), and each planned micro-batch's shape.
struct HeldOut {
  std::vector<Planned> planned;
  std::vector<std::size_t> shape_of;  // per planned micro-batch: its index in `shapes`
  std::vector<std::vector<std::int64_t>> shapes;
  std::vector<std::size_t> planned_count;  // per shape
  // Per shape: the calibration times this very shape (one sequence of C tokens is one), so the fit
  // has seen it and predicting it is not out of sample.
  std::vector<bool> calibrated;
};

HeldOut collect_held_out(std::vector<Planned> planned, std::span<const std::vector<std::int64_t>> packings) {
  HeldOut h;
  std::map<std::vector<std::int64_t>, std::size_t> index;
  for (const Planned& p : planned) {
    const auto [it, added] = index.try_emplace(p.lengths, h.shapes.size());
    if (added) {
      h.shapes.push_back(p.lengths);
      h.planned_count.push_back(0);
      h.calibrated.push_back(std::find(packings.begin(), packings.end(), p.lengths) != packings.end());
    }
    ++h.planned_count[it->second];
    h.shape_of.push_back(it->second);
  }
  h.planned = std::move(planned);
  return h;
}

double relative_error(double predicted, double measured) { return predicted / measured - 1; }

// How one prediction (per shape) did against the measured medians (per shape): per shape, over the
// shapes the calibration does not time (max, mean |error|) and over every shape (max); and per
// rank's step, the sum of its planned micro-batches in one batch (what the planner balances).
struct Errors {
  std::vector<double> per_shape;
  double worst_out_of_sample = 0;
  double mean_out_of_sample = 0;
  double worst = 0;
  double worst_rank_step = 0;
};

Errors errors_of(const HeldOut& h, std::span<const double> predicted, std::span<const double> measured) {
  Errors e;
  std::size_t out_of_sample = 0;
  for (std::size_t s = 0; s < h.shapes.size(); ++s) {
    e.per_shape.push_back(relative_error(predicted[s], measured[s]));
    const double error = std::abs(e.per_shape.back());
    e.worst = std::max(e.worst, error);
    if (h.calibrated[s]) continue;
    ++out_of_sample;
    e.worst_out_of_sample = std::max(e.worst_out_of_sample, error);
    e.mean_out_of_sample += error;
  }
  if (out_of_sample > 0) e.mean_out_of_sample /= static_cast<double>(out_of_sample);
  std::map<std::pair<std::size_t, std::uint32_t>, std::pair<double, double>> steps;  // (batch, rank) -> sums
  for (std::size_t i = 0; i < h.planned.size(); ++i) {
    auto& [p, m] = steps[{h.planned[i].batch, h.planned[i].rank}];
    p += predicted[h.shape_of[i]];
    m += measured[h.shape_of[i]];
  }
  for (const auto& [step, sums] : steps) {
    e.worst_rank_step = std::max(e.worst_rank_step, std::abs(relative_error(sums.first, sums.second)));
  }
  return e;
}

std::int64_t tokens(std::span<const std::int64_t> lengths) {
  return std::accumulate(lengths.begin(), lengths.end(), std::int64_t{0});
}

// How this machine moved during the rounds: each round's median of run / its micro-batch's median
// (the core's speed in that round, inverted), and how far single runs scatter around their medians.
void report_machine(const std::vector<std::vector<double>>& runs, std::span<const double> medians) {
  const std::size_t rounds = runs.front().size();
  std::printf("round's median run / micro-batch median:");
  std::vector<double> scatter;
  for (std::size_t k = 0; k < rounds; ++k) {
    std::vector<double> ratios;
    for (std::size_t i = 0; i < runs.size(); ++i) ratios.push_back(runs[i][k] / medians[i]);
    std::printf(" %.2f", hdp::median(ratios));
    for (double r : ratios) scatter.push_back(std::abs(r - 1));
  }
  std::sort(scatter.begin(), scatter.end());
  std::printf("\nsingle runs around their micro-batch's median: median %.1f%%, 90th percentile %.1f%%, max %.1f%%\n\n",
              100 * hdp::median(scatter), 100 * scatter[scatter.size() * 9 / 10], 100 * scatter.back());
}

// The measurement's own noise: each micro-batch's median over the even rounds against its median over
// the odd rounds. Where two halves of the same runs disagree by x, the median of all of them is
// uncertain by about x/2 either way, a floor under any prediction's error.
void report_halves(const std::vector<std::vector<double>>& runs) {
  if (runs.front().size() < 2) {
    std::printf("(one round: no even/odd comparison)\n\n");
    return;
  }
  std::vector<double> gaps;
  for (const std::vector<double>& r : runs) {
    std::vector<double> even, odd;
    for (std::size_t k = 0; k < r.size(); ++k) (k % 2 == 0 ? even : odd).push_back(r[k]);
    gaps.push_back(std::abs(hdp::median(even) / hdp::median(odd) - 1));
  }
  std::printf("medians of the even rounds against the odd rounds', per micro-batch: median %.1f%%, max %.1f%%\n\n",
              100 * hdp::median(gaps), 100 * *std::max_element(gaps.begin(), gaps.end()));
}

// One line per held-out shape, then the summary of each prediction.
void print_results(const HeldOut& h, const std::vector<std::vector<double>>& shape_runs,
                   std::span<const double> measured, std::span<const std::vector<double>> predictions,
                   std::span<const Errors> errors) {
  std::printf("| sequences | tokens | longest | planned | calibration shape | measured ms (median, min-max) | refit ms "
              "(error) | file ms (error) | file / speed ms (error) |\n|---|---|---|---|---|---|---|---|---|\n");
  for (std::size_t s = 0; s < h.shapes.size(); ++s) {
    const std::vector<std::int64_t>& lengths = h.shapes[s];
    const auto [low, high] = std::minmax_element(shape_runs[s].begin(), shape_runs[s].end());
    std::printf("| %zu | %lld | %lld | %zu | %s | %.1f (%.1f-%.1f) |", lengths.size(),
                static_cast<long long>(tokens(lengths)),
                static_cast<long long>(*std::max_element(lengths.begin(), lengths.end())), h.planned_count[s],
                h.calibrated[s] ? "yes" : "no", measured[s], *low, *high);
    for (std::size_t k = 0; k < predictions.size(); ++k) {
      std::printf(" %.1f (%+.1f%%) |", predictions[k][s], 100 * errors[k].per_shape[s]);
    }
    std::printf("\n");
  }
  std::printf("\n| prediction | max, shapes calibration does not time | mean, same | max, every shape | worst rank "
              "step |\n|---|---|---|---|---|\n");
  const char* names[] = {"calibration refitted in these rounds", "file of step 1 alone",
                         "file of step 1 / speed factor"};
  for (std::size_t k = 0; k < errors.size(); ++k) {
    const Errors& e = errors[k];
    std::printf("| %s | %.1f%% | %.1f%% | %.1f%% | %.1f%% |\n", names[k], 100 * e.worst_out_of_sample,
                100 * e.mean_out_of_sample, 100 * e.worst, 100 * e.worst_rank_step);
  }
  std::printf("\ntarget: 15%% (calibration refitted in these rounds, every shape it does not time)\n");
}

void run(const Options& o) {
  const hdp::ops::model::LlamaConfig& m = o.calibration.model;
  std::printf("# bench_calibration: LlamaModel d_model %d, %d layers, %d heads, ffn %d (f32, CPU, %d thread(s)), "
              "C = %lld, %s clock; load average %.2f at start\n\n",
              m.d_model, m.n_layers, m.n_heads, m.ffn_dim, o.calibration.threads,
              static_cast<long long>(o.calibration.capacity), hdp::mesh::clock_name(o.calibration.clock),
              hdp::mesh::load_average());

  for (const std::string& dist : o.dists) hdp::mesh::named_distribution(dist);  // a typo fails before the timing
  // 1. The file.
  const hdp::mesh::Calibration calibration = hdp::mesh::calibrate(o.calibration);
  const hdp::mesh::CostModel& file = calibration.cost;
  std::printf("## 1. Calibration (%zu micro-batches, median of %d rounds, as hdp plan --calibrate)\n\n"
              "file: alpha %.4g ms/token^2, beta %.4g ms/token, gamma %.4g ms\n\n",
              calibration.samples.size(), o.calibration.repeats, file.alpha_ms, file.beta_ms, file.gamma_ms);

  // 2. The held-out micro-batches.
  std::vector<std::vector<std::int64_t>> micro_batches = hdp::mesh::calibration_packings(o.calibration.capacity);
  const std::size_t packings = micro_batches.size();
  std::vector<Planned> planned;
  for (std::size_t batch = 0; batch < o.dists.size(); ++batch) {
    std::vector<Planned> one = plan_batch(o, file, batch);
    planned.insert(planned.end(), one.begin(), one.end());
  }
  const HeldOut held_out = collect_held_out(std::move(planned), micro_batches);
  std::printf("## 2. Held-out: %zu planned micro-batches of %zu shapes (%zu batches, seed %llu, %lld ranks, %lld x C "
              "tokens each)\n\n",
              held_out.planned.size(), held_out.shapes.size(), o.dists.size(),
              static_cast<unsigned long long>(o.seed), static_cast<long long>(o.ranks),
              static_cast<long long>(o.ranks * o.micro_batches));

  // 3. Rounds: the calibration micro-batches first in the list, then each held-out shape.
  micro_batches.insert(micro_batches.end(), held_out.shapes.begin(), held_out.shapes.end());
  hdp::ops::model::LlamaModel model(m);
  model.init(1);
  const auto runs =
      hdp::mesh::time_rounds(model, micro_batches, o.rounds, o.calibration.clock, static_cast<unsigned>(o.seed));
  std::vector<double> medians;
  for (const std::vector<double>& r : runs) medians.push_back(hdp::median(r));
  std::printf("## 3. %d rounds of %zu micro-batches each (%zu calibration, %zu held-out shapes), shuffled; load "
              "average %.2f at the end\n\n",
              o.rounds, micro_batches.size(), packings, held_out.shapes.size(), hdp::mesh::load_average());
  report_machine(runs, medians);
  report_halves(runs);

  // 4. Predictions, each from the calibration micro-batches only.
  std::vector<hdp::mesh::CostSample> samples;
  double packings_file_ms = 0, packings_measured_ms = 0;
  for (std::size_t i = 0; i < packings; ++i) {
    samples.push_back({micro_batches[i], medians[i]});
    packings_file_ms += file.micro_batch_ms(micro_batches[i], 1);
    packings_measured_ms += medians[i];
  }
  hdp::mesh::CostModel refit = file;
  hdp::mesh::fit_compute_cost(samples, refit);
  hdp::mesh::SpeedTracker tracker;
  tracker.report("this machine", packings_file_ms, packings_measured_ms);
  const double speed = tracker.filtered("this machine");
  std::printf("## 4. Predictions\n\nrefit: alpha %.4g ms/token^2, beta %.4g ms/token, gamma %.4g ms; speed factor of "
              "the file now %.3f\n\n",
              refit.alpha_ms, refit.beta_ms, refit.gamma_ms, speed);

  const std::vector<std::vector<double>> shape_runs(runs.begin() + static_cast<std::ptrdiff_t>(packings), runs.end());
  const std::span<const double> measured(medians.begin() + static_cast<std::ptrdiff_t>(packings), medians.end());
  std::vector<std::vector<double>> predictions(3);  // refit, file, file / speed
  for (const std::vector<std::int64_t>& lengths : held_out.shapes) {
    predictions[0].push_back(refit.micro_batch_ms(lengths, 1));
    predictions[1].push_back(file.micro_batch_ms(lengths, 1));
    predictions[2].push_back(predictions[1].back() / speed);
  }
  std::vector<Errors> errors;
  for (const std::vector<double>& p : predictions) errors.push_back(errors_of(held_out, p, measured));
  print_results(held_out, shape_runs, measured, predictions, errors);
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each section as it is done, also into a file
  hdp::ops::retain_freed_host_memory();  // as `hdp plan --calibrate` measures (ops/host_memory.h)
  Options o;
  hdp::ops::model::LlamaConfig& m = o.calibration.model;
  int heads = m.n_heads;
  std::string clock = "wall";
  CLI::App app{"Does the calibrated cost model predict the real time of planned micro-batches?"};
  // CLI::PositiveNumber would do, but its error prints the limits of double in full.
  const CLI::Range at_least_one(1, std::numeric_limits<int>::max());
  app.add_option("--dists", o.dists, "length distributions of the held-out batches, one batch each")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--seed", o.seed, "seed of the held-out batches and of the rounds' order")->capture_default_str();
  app.add_option("--ranks", o.ranks, "ranks each batch is planned over")->check(at_least_one)->capture_default_str();
  app.add_option("--micro-batches", o.micro_batches, "a batch holds ranks x this x C tokens")
      ->check(at_least_one)
      ->capture_default_str();
  app.add_option("--capacity", o.calibration.capacity, "C: the most tokens of one micro-batch")
      ->check(CLI::Range(64, 1 << 20))
      ->capture_default_str();
  app.add_option("--repeats", o.calibration.repeats, "calibration rounds of step 1")
      ->check(at_least_one)
      ->capture_default_str();
  app.add_option("--rounds", o.rounds, "interleaved rounds of step 3")->check(at_least_one)->capture_default_str();
  app.add_option("--threads", o.calibration.threads, "OpenMP threads of the timed ops")
      ->check(at_least_one)
      ->capture_default_str();
  app.add_option("--clock", clock, "wall, or cpu (the thread's CPU time; needs --threads 1)")
      ->check(CLI::IsMember({"wall", "cpu"}))
      ->capture_default_str();
  app.add_option("--d-model", m.d_model, "model width")->check(at_least_one)->capture_default_str();
  app.add_option("--layers", m.n_layers, "decoder layers")->check(at_least_one)->capture_default_str();
  app.add_option("--heads", heads, "attention heads (as many KV heads)")->check(at_least_one)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  m.n_heads = m.n_kv_heads = heads;
  m.ffn_dim = 3 * m.d_model;  // the default model's ratio
  try {
    o.calibration.clock = hdp::mesh::parse_clock(clock);
    run(o);
  } catch (const hdp::Error& e) {
    std::fprintf(stderr, "bench_calibration: %s\n", e.what());
    return 2;
  }
  return 0;
}
