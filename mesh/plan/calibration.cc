#include "mesh/plan/calibration.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <thread>

#include "common/error.h"
#include "common/median.h"

namespace hdp::mesh {
namespace {

constexpr std::int64_t kMinCapacity = 64;  // the shortest timed sequence is C/32 >= 2 tokens

double now_ms(TimingClock clock) {
  if (clock == TimingClock::kWall) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) / 1e6;
}

// The value of the first "key: value" line of a /proc file, e.g. the CPU's model name.
std::string proc_field(const char* path, const std::string& key) {
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const auto colon = line.find(':');
    if (line.rfind(key, 0) == 0 && colon != std::string::npos) {
      const auto value = line.find_first_not_of(" \t", colon + 1);
      return value == std::string::npos ? "" : line.substr(value);
    }
  }
  return "unknown";
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

// What the figures depend on besides the model: the CPU, how many threads ran the ops, and how busy
// the machine was (the 1-minute load average before and after; timings on a shared machine are only
// as good as that).
nlohmann::json machine_record(double load_before) {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return {{"host", host},
          {"cpu", proc_field("/proc/cpuinfo", "model name")},
          {"logical_cpus", std::thread::hardware_concurrency()},
          {"threads", omp_get_max_threads()},
          {"device", "cpu"},
          {"dtype", "f32"},
          {"load_average", {load_before, load_average()}},
          {"measured_at", utc_now()}};
}

nlohmann::json config_record(const ops::model::LlamaConfig& c) {
  return {{"vocab_size", c.vocab_size}, {"d_model", c.d_model}, {"n_layers", c.n_layers},
          {"n_heads", c.n_heads},       {"n_kv_heads", c.n_kv_heads}, {"ffn_dim", c.ffn_dim}};
}

void validate(const CalibrationOptions& o) {
  o.model.validate();
  if (o.repeats < 1) throw InvalidArgument("calibration: repeats must be >= 1, got " + std::to_string(o.repeats));
  if (o.threads < 0) throw InvalidArgument("calibration: threads must be >= 0, got " + std::to_string(o.threads));
  if (o.clock == TimingClock::kThreadCpu && o.threads != 1) {
    throw InvalidArgument("calibration: the cpu clock times one thread; it needs threads = 1");
  }
  if (!std::isfinite(o.link_gbps) || o.link_gbps <= 0) {
    throw InvalidArgument("calibration: link_gbps must be > 0, got " + std::to_string(o.link_gbps));
  }
}

}  // namespace

double load_average() {
  std::ifstream in("/proc/loadavg");
  double one_minute = -1;
  in >> one_minute;
  return one_minute;
}

std::vector<std::vector<std::int64_t>> calibration_packings(std::int64_t capacity) {
  if (capacity < kMinCapacity) {
    throw InvalidArgument("calibration: capacity must be >= " + std::to_string(kMinCapacity) + " tokens, got " +
                          std::to_string(capacity));
  }
  std::vector<std::vector<std::int64_t>> packings;
  for (std::int64_t parts = 1; parts <= 32; parts *= 2) packings.push_back({capacity / parts});
  for (std::int64_t parts = 2; parts <= 32; parts *= 2) {
    packings.emplace_back(static_cast<std::size_t>(parts), capacity / parts);
  }
  packings.emplace_back(4, capacity / 8);
  return packings;
}

const char* clock_name(TimingClock clock) { return clock == TimingClock::kWall ? "wall" : "cpu"; }

TimingClock parse_clock(std::string_view name) {
  if (name == "wall") return TimingClock::kWall;
  if (name == "cpu") return TimingClock::kThreadCpu;
  throw InvalidArgument("unknown clock '" + std::string(name) + "': expected wall or cpu");
}

ops::model::Batch packed_micro_batch(std::span<const std::int64_t> lengths, int vocab_size) {
  std::vector<std::vector<std::int32_t>> documents;
  for (std::int64_t s : lengths) {
    std::vector<std::int32_t> doc(static_cast<std::size_t>(s));
    for (std::size_t i = 0; i < doc.size(); ++i) doc[i] = static_cast<std::int32_t>((i * 31 + 7) % vocab_size);
    documents.push_back(std::move(doc));
  }
  return ops::model::pack_documents(documents);
}

double time_forward_backward(ops::model::LlamaModel& model, const ops::model::Batch& batch, TimingClock clock) {
  const double start = now_ms(clock);
  model.forward(batch);
  model.backward(1.0);
  return now_ms(clock) - start;
}

std::vector<std::vector<double>> time_rounds(ops::model::LlamaModel& model,
                                             std::span<const std::vector<std::int64_t>> micro_batches, int rounds,
                                             TimingClock clock, unsigned order_seed) {
  if (rounds < 1) throw InvalidArgument("timing needs rounds >= 1, got " + std::to_string(rounds));
  std::vector<ops::model::Batch> batches;
  for (const auto& lengths : micro_batches) batches.push_back(packed_micro_batch(lengths, model.config().vocab_size));
  for (const ops::model::Batch& batch : batches) time_forward_backward(model, batch, clock);  // caches, allocations
  std::vector<std::size_t> order(batches.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::mt19937 shuffle_rng(order_seed);
  std::vector<std::vector<double>> runs(batches.size());
  for (int round = 0; round < rounds; ++round) {
    std::shuffle(order.begin(), order.end(), shuffle_rng);
    for (std::size_t i : order) runs[i].push_back(time_forward_backward(model, batches[i], clock));
  }
  return runs;
}

std::vector<double> time_micro_batches(ops::model::LlamaModel& model,
                                       std::span<const std::vector<std::int64_t>> micro_batches, int rounds,
                                       TimingClock clock) {
  std::vector<double> medians;
  for (std::vector<double>& runs : time_rounds(model, micro_batches, rounds, clock)) {
    medians.push_back(median(std::move(runs)));
  }
  return medians;
}

Calibration calibrate(const CalibrationOptions& options) {
  validate(options);
  const auto packings = calibration_packings(options.capacity);
  if (options.threads > 0) omp_set_num_threads(options.threads);
  const double load_before = load_average();
  const ops::model::LlamaConfig& c = options.model;
  ops::model::LlamaModel model(c);
  model.init(1);
  const std::vector<double> measured = time_micro_batches(model, packings, options.repeats, options.clock);

  Calibration out;
  for (std::size_t i = 0; i < packings.size(); ++i) out.samples.push_back({packings[i], measured[i]});
  CostModel& cost = out.cost;
  cost.name = "cpu-llama-d" + std::to_string(c.d_model) + "-l" + std::to_string(c.n_layers);
  // The preset's accounting, in f32: K and V of every layer, sent for forward, backward and dKV.
  cost.ring_bytes_per_token = 3.0 * c.n_layers * 2.0 * c.n_kv_heads * c.head_dim() * sizeof(float);
  cost.link_gbps = options.link_gbps;
  fit_compute_cost(out.samples, cost);

  const std::vector<double> residuals = relative_residuals(cost, out.samples);
  nlohmann::json samples = nlohmann::json::array();
  for (std::size_t i = 0; i < out.samples.size(); ++i) {
    samples.push_back({{"lengths", out.samples[i].lengths},
                       {"measured_ms", out.samples[i].measured_ms},
                       {"fitted_ms", cost.micro_batch_ms(out.samples[i].lengths, 1)},
                       {"residual", residuals[i]}});
  }
  out.record = {{"model", config_record(c)},
                {"capacity", options.capacity},
                {"repeats", options.repeats},
                {"clock", clock_name(options.clock)},
                {"link_gbps_measured", false},
                {"machine", machine_record(load_before)},
                {"samples", std::move(samples)}};
  return out;
}

}  // namespace hdp::mesh
