// bench/data_order: the epoch's order (trainer/data/permutation.h) against the shuffle it replaced,
// measured in the same run at the default corpus's 1,012,445 pieces.
//
//   shuffle_epoch   the previous order, a Fisher-Yates shuffle of the whole epoch driven by
//                   std::mt19937_64 (an unbiased draw by rejection): what every worker computed,
//                   and held at 8 bytes a piece, before the first step of each epoch
//   keyed_step      the keyed permutation's lookups of one step of the demo job (400 pieces)
//   keyed_epoch     every piece of the epoch looked up once: the same work spread over the epoch's
//                   steps instead of paid before the first
//
// Counters: ns_per_piece for each, and vs_shuffle (the row's time over shuffle_epoch's, run first).
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "trainer/data/mix.h"
#include "trainer/data/permutation.h"

namespace {

using hdp::trainer::data::KeyedPermutation;
using hdp::trainer::data::mix;

constexpr std::uint64_t kPieces = 1'012'445;
constexpr std::uint64_t kStepPieces = 400;
double shuffle_seconds = 0;  // shuffle_epoch's mean, for the later rows' ratio

std::uint64_t draw_below(std::mt19937_64& rng, std::uint64_t n) {
  const std::uint64_t threshold = (0 - n) % n;
  for (;;) {
    const std::uint64_t x = rng();
    if (x >= threshold) return x % n;
  }
}

void shuffle_epoch(benchmark::State& state) {
  std::uint64_t epoch = 0;
  double total = 0;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::uint64_t> order(kPieces);
    std::iota(order.begin(), order.end(), std::uint64_t{0});
    std::mt19937_64 rng(mix(1, epoch++));
    for (std::uint64_t i = kPieces; i > 1; --i) std::swap(order[i - 1], order[draw_below(rng, i)]);
    benchmark::DoNotOptimize(order.data());
    total += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  shuffle_seconds = total / static_cast<double>(state.iterations());
  state.counters["ns_per_piece"] = shuffle_seconds * 1e9 / kPieces;
  state.counters["vs_shuffle"] = 1.0;
}

void lookups(benchmark::State& state, std::uint64_t pieces) {
  std::uint64_t epoch = 0, sink = 0;
  double total = 0;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    const KeyedPermutation order(mix(1, epoch++), kPieces);
    for (std::uint64_t i = 0; i < pieces; ++i) sink += order(i);
    benchmark::DoNotOptimize(sink);
    total += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  const double seconds = total / static_cast<double>(state.iterations());
  state.counters["ns_per_piece"] = seconds * 1e9 / static_cast<double>(pieces);
  state.counters["vs_shuffle"] = shuffle_seconds > 0 ? seconds / shuffle_seconds : 0;
}

void keyed_step(benchmark::State& state) { lookups(state, kStepPieces); }
void keyed_epoch(benchmark::State& state) { lookups(state, kPieces); }

BENCHMARK(shuffle_epoch)->Unit(benchmark::kMillisecond);
BENCHMARK(keyed_step)->Unit(benchmark::kMicrosecond);
BENCHMARK(keyed_epoch)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
