// File: mesh/plan/calibration.h
//
// Calibrates the cost model on this machine (`hdp plan --calibrate`, docs/scheduler.md): times
// forward + backward of the real model (ops/model's LlamaModel, f32 on the CPU) over micro-batches
// of several lengths and packings, fits α, β and γ (mesh/plan/cost_fit.h), and keeps a record of the
// model, the settings and the machine they were measured on, which save_cost_model writes beside
// the coefficients. Everything here blocks for as long as the timing takes.
//
// Example:
//   CalibrationOptions options;            // LlamaConfig's default model, C = 1024
//   const Calibration c = calibrate(options);
//   save_cost_model(c.cost, "cost.json", c.record);
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "mesh/plan/cost_fit.h"
#include "mesh/plan/cost_model.h"
#include "ops/model/llama_config.h"
#include "ops/model/llama_model.h"

namespace hdp::mesh {

// What a timing measures. The wall clock is what a step takes. The calling thread's CPU clock leaves
// out the time other processes hold its core (and a VM's steal), so it is what the ops take on a
// core of their own: the steadier measure on a shared machine, and a right one only with one thread
// (OpenMP workers' time is not the caller's).
enum class TimingClock { kWall, kThreadCpu };

struct CalibrationOptions {
  ops::model::LlamaConfig model;  // the model the trainer runs
  std::int64_t capacity = 1024;   // C: the most tokens a timed micro-batch holds (a rank's limit)
  int repeats = 5;                // timed rounds after a warm-up; a micro-batch's time is its median
  int threads = 0;                // OpenMP threads of the timed ops (set for the process); 0: as is
  TimingClock clock = TimingClock::kWall;  // kThreadCpu needs threads == 1
  // Not measured: the CPU data plane's rings do not exist yet. Written to the file so that a plan
  // over rings has a transfer time.
  double link_gbps = 10;
};

struct Calibration {
  CostModel cost;                   // α, β, γ fitted; ring bytes from the model's K and V
  std::vector<CostSample> samples;  // the timed micro-batches
  nlohmann::json record;            // model, settings, machine, and every sample measured vs fitted
};

// The micro-batches calibration times for capacity C: one sequence of C, C/2, …, C/32 tokens (the
// quadratic term, and down to the few-token tails a plan ends ranks with, where γ is most of the
// time), C tokens packed as 2, 4, …, 32 equal sequences (Σs fixed, Σs² falling: α against β) and
// C/2 tokens as 4 sequences (γ against β): 12 micro-batches. Throws InvalidArgument when C < 64.
std::vector<std::vector<std::int64_t>> calibration_packings(std::int64_t capacity);

// A micro-batch's sequences packed back to back as one Batch, as the trainer runs it; the token
// values do not change the time.
ops::model::Batch packed_micro_batch(std::span<const std::int64_t> lengths, int vocab_size);

// Milliseconds on `clock` of one forward + backward of `model` on `batch`.
double time_forward_backward(ops::model::LlamaModel& model, const ops::model::Batch& batch, TimingClock clock);

// Every timed run of each micro-batch: runs[i] holds micro-batch i's `rounds` times in milliseconds
// (on `clock`), after one untimed warm-up round. Each micro-batch's sequences are packed back to back
// as one Batch (forward + backward of `model`). Every round runs all micro-batches once each, in an
// order shuffled anew for every round (std::mt19937 seeded with `order_seed`): a change in the
// machine's speed then hits them alike, and no micro-batch always runs after the same one.
std::vector<std::vector<double>> time_rounds(ops::model::LlamaModel& model,
                                             std::span<const std::vector<std::int64_t>> micro_batches, int rounds,
                                             TimingClock clock, unsigned order_seed = 1);

// The median of each micro-batch's runs in time_rounds: its time on this machine now.
std::vector<double> time_micro_batches(ops::model::LlamaModel& model,
                                       std::span<const std::vector<std::int64_t>> micro_batches, int rounds,
                                       TimingClock clock);

// "wall" or "cpu" (the thread's CPU clock), as the command line and the file spell them; parse
// throws InvalidArgument naming an unknown word.
const char* clock_name(TimingClock clock);
TimingClock parse_clock(std::string_view name);

// The 1-minute load average (/proc/loadavg), -1 where unknown: how busy a shared machine was while
// it timed something.
double load_average();

// Times calibration_packings(options.capacity) on a fresh model and fits the cost model. Throws
// InvalidArgument for a bad model shape, capacity, repeat count, thread count, link bandwidth, or
// the CPU clock with more than one thread.
Calibration calibrate(const CalibrationOptions& options);

}  // namespace hdp::mesh
