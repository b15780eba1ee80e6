#include "bench/comm_model.h"

#include <omp.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>

#include "mesh/communicator_factory.h"
#include "mesh/distributed_step.h"
#include "mesh/length_distribution.h"
#include "mesh/ring_attention.h"
#include "ops/model/llama_params.h"

namespace hdp::bench {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using ops::DType;
using ops::Tensor;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// Runs fn(rank) on n threads, each with `omp_threads` OpenMP threads; rethrows a rank's failure.
void on_ranks(int n, int omp_threads, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      omp_set_num_threads(omp_threads);
      try {
        fn(r);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

constexpr int kHeads = 4, kKvHeads = 2, kHeadDim = 32;

}  // namespace

void add_ring_attention_rows(Report& report, const std::vector<int>& ranks, std::int64_t tokens_per_rank, int reps) {
  const std::string per_rank = std::to_string(tokens_per_rank / 1024) + "K/rank";
  for (int d : ranks) {
    auto comms = mesh::connect_local(d, 600s);
    std::vector<std::uint32_t> ring;
    for (int r = 0; r < d; ++r) ring.push_back(static_cast<std::uint32_t>(r));
    const std::vector<std::int64_t> lengths{tokens_per_rank * d};
    std::vector<double> total(static_cast<std::size_t>(reps)), wait(static_cast<std::size_t>(reps));
    std::vector<double> alone(static_cast<std::size_t>(reps));
    std::barrier sync(d);
    on_ranks(d, 1, [&](int r) {
      mesh::RingLayout layout{ring, r, lengths};
      const std::int64_t rows = layout.shard_rows(r);
      const Tensor q = Tensor::zeros({rows, kHeads, kHeadDim}, DType::kF32);
      const Tensor k = Tensor::zeros({rows, kKvHeads, kHeadDim}, DType::kF32);
      const Tensor v = Tensor::zeros({rows, kKvHeads, kHeadDim}, DType::kF32);
      for (Tensor t : {q, k, v}) {
        float* p = t.data<float>();
        for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>((i * 7919 % 1000) - 500) * 1e-3f;
      }
      mesh::Communicator& comm = *comms[static_cast<std::size_t>(r)];
      for (int rep = 0; rep < reps; ++rep) {
        // The micro-batch: forward + backward, timed on each rank, the slowest rank counted.
        sync.arrive_and_wait();
        mesh::RingAttention attention(comm, layout, {0}, static_cast<std::uint32_t>(rep), 600s);
        auto start = Clock::now();
        const ops::AttentionOutput o = attention.forward(0, q, k, v);
        const Tensor dq = Tensor::zeros(q.shape(), DType::kF32), dk = Tensor::zeros(k.shape(), DType::kF32),
                     dv = Tensor::zeros(v.shape(), DType::kF32);
        attention.backward(0, q, k, v, o, o.out, dq, dk, dv);
        const double t = ms_since(start), w = attention.comm_wait_ms();
        // The same transfers alone: D-1 K/V hops (forward), D-1 K/V hops and D dK/dV hops (backward).
        sync.arrive_and_wait();
        start = Clock::now();
        const int left = (r + d - 1) % d, right = (r + 1) % d;
        const int hops = d > 1 ? 3 * d - 2 : 0;
        for (int h = 0; h < hops; ++h) {
          const int held = (r - h % d + 2 * d) % d, next = (held + d - 1) % d;
          const Tensor in_k = Tensor::empty({layout.shard_rows(next), kKvHeads, kHeadDim}, DType::kF32);
          const Tensor in_v = Tensor::empty(in_k.shape(), DType::kF32);
          const Tensor out_k = Tensor::zeros({layout.shard_rows(held), kKvHeads, kHeadDim}, DType::kF32);
          const Tensor out_v = Tensor::zeros(out_k.shape(), DType::kF32);
          auto a = comm.irecv(in_k, left, mesh::ring_tag(1u << 20, 0, 0, h));
          auto b = comm.irecv(in_v, left, mesh::ring_tag(1u << 20, 0, 1, h));
          auto c = comm.isend(out_k, right, mesh::ring_tag(1u << 20, 0, 0, h));
          auto e = comm.isend(out_v, right, mesh::ring_tag(1u << 20, 0, 1, h));
          for (auto* work : {&a, &b, &c, &e}) (*work)->wait(600s);
        }
        const double transfers = ms_since(start);
        if (r == 0) {
          total[static_cast<std::size_t>(rep)] = t;
          wait[static_cast<std::size_t>(rep)] = w;
          alone[static_cast<std::size_t>(rep)] = transfers;
        }
      }
    });
    const double t = median(total), w = median(wait), transfers = median(alone);
    const std::string name = "ring attention fwd+bwd " + per_rank;
    report.add(Row{name, d, t, "ms", Baseline{"compute alone (time not waiting)", t - w}});
    report.add(Row{"ring attention comm waited " + per_rank, d, w, "ms",
                   Baseline{"same transfers alone", transfers}});
    report.add(Row{"ring attention comm hidden " + per_rank, d,
                   transfers > 0 ? 100.0 * std::max(0.0, 1.0 - w / transfers) : 100.0, "%", std::nullopt});
  }
}

void add_step_rows(Report& report, const std::vector<int>& ranks, std::int64_t batch_tokens, int reps) {
  const ops::model::LlamaConfig config;  // bench_ops' model: 4 layers, d_model 256
  const std::int64_t context = 4096;
  const std::vector<std::int64_t> lengths =
      mesh::draw_batch(mesh::named_distribution("github"), context, batch_tokens, /*seed=*/17);
  std::vector<std::vector<std::int32_t>> batch;
  for (std::size_t s = 0; s < lengths.size(); ++s) {
    std::vector<std::int32_t> seq(static_cast<std::size_t>(lengths[s]));
    for (std::size_t i = 0; i < seq.size(); ++i) seq[i] = static_cast<std::int32_t>((s * 131 + i * 7) % 256);
    batch.push_back(std::move(seq));
  }
  std::int64_t tokens = 0;
  for (std::int64_t len : lengths) tokens += len;
  double single = 0;
  std::vector<int> counts{1};  // the baseline first
  for (int n : ranks) {
    if (n > 1) counts.push_back(n);
  }
  for (int n : counts) {
    mesh::PlanRequest request;
    request.lengths = lengths;
    request.speeds.assign(static_cast<std::size_t>(n), 1.0);
    request.capacity = std::max<std::int64_t>(context / 2, (tokens + n - 1) / n / 2);
    request.cost = mesh::gpu_preset_7b();
    const mesh::Plan plan = mesh::make_plan(request, mesh::Strategy::kBalanced);
    auto comms = mesh::connect_local(n, 600s);
    std::vector<double> seconds(static_cast<std::size_t>(reps));
    std::barrier sync(n);
    const int omp = n == 1 ? static_cast<int>(std::thread::hardware_concurrency()) : 1;
    on_ranks(n, omp, [&](int r) {
      ops::model::LlamaModel model(config);
      model.init(1);
      mesh::ZeroOptimizer zero(model.params().numel(), r, n);
      mesh::DistributedStep step(model, zero, *comms[static_cast<std::size_t>(r)], {.timeout = 600s});
      step.run(plan, batch);  // warm-up
      for (int rep = 0; rep < reps; ++rep) {
        sync.arrive_and_wait();
        const auto start = Clock::now();
        step.run(plan, batch);
        sync.arrive_and_wait();
        if (r == 0) seconds[static_cast<std::size_t>(rep)] = ms_since(start) / 1e3;
      }
    });
    const double rate = static_cast<double>(tokens) / median(seconds);
    if (n == 1) single = rate;
    report.add(Row{"distributed step " + std::to_string(tokens) + " tokens", n, rate, "tokens/s",
                   single > 0 ? std::optional<Baseline>(Baseline{"1 rank", single}) : std::nullopt});
  }
}

}  // namespace hdp::bench
