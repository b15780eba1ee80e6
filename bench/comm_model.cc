#include "bench/comm_model.h"

#include <omp.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <numeric>
#include <tuple>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>

#include "common/clock.h"
#include "common/error.h"
#include "common/median.h"
#include "mesh/step/batch_builder.h"
#include "mesh/comm/communicator_factory.h"
#include "mesh/step/distributed_step.h"
#include "mesh/plan/length_distribution.h"
#include "mesh/step/ring_attention.h"
#include "ops/model/llama_params.h"

namespace hdp::bench {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using ops::DType;
using ops::Tensor;

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

// Point to point between threads of this process through memory: a send copies its buffer into a
// queue, a recv's wait() copies it out. What the ring's transfers cost when they are memcpys, for
// the ring attention baseline; it offers no collective.
struct Mailbox {
  std::mutex mutex;
  std::condition_variable arrived;
  std::map<std::tuple<int, int, mesh::Tag>, std::deque<Tensor>> queues;  // (src, dst, tag)
};

class DoneWork final : public mesh::Work {
 public:
  void wait(std::chrono::milliseconds) override {}
};

class MailboxRecv final : public mesh::Work {
 public:
  MailboxRecv(std::shared_ptr<Mailbox> box, std::tuple<int, int, mesh::Tag> key, Tensor buffer)
      : box_(std::move(box)), key_(key), buffer_(std::move(buffer)) {}
  void wait(std::chrono::milliseconds timeout) override {
    if (done_) return;
    std::unique_lock lock(box_->mutex);
    if (!box_->arrived.wait_for(lock, timeout, [&] { return !box_->queues[key_].empty(); })) {
      throw TimeoutError("bench mailbox: nothing arrived");
    }
    buffer_.copy_from(box_->queues[key_].front());
    box_->queues[key_].pop_front();
    done_ = true;
  }

 private:
  std::shared_ptr<Mailbox> box_;
  std::tuple<int, int, mesh::Tag> key_;
  Tensor buffer_;
  bool done_ = false;
};

class MailboxCommunicator final : public mesh::Communicator {
 public:
  MailboxCommunicator(std::shared_ptr<Mailbox> box, int rank, int size) : box_(std::move(box)), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Duration timeout() const override { return std::chrono::minutes(10); }
  std::unique_ptr<mesh::Work> isend(const Tensor& buffer, int dst, mesh::Tag tag, mesh::Stream) override {
    {
      std::lock_guard lock(box_->mutex);
      box_->queues[{rank_, dst, tag}].push_back(buffer.clone());
    }
    box_->arrived.notify_all();
    return std::make_unique<DoneWork>();
  }
  std::unique_ptr<mesh::Work> irecv(const Tensor& buffer, int src, mesh::Tag tag, mesh::Stream) override {
    return std::make_unique<MailboxRecv>(box_, std::tuple{src, rank_, tag}, buffer);
  }
  std::unique_ptr<mesh::Work> iallreduce(const Tensor&, mesh::ReduceOp, mesh::Stream) override { return none(); }
  std::unique_ptr<mesh::Work> ireduce_scatter(const Tensor&, const Tensor&, std::span<const std::int64_t>,
                                              mesh::ReduceOp, mesh::Stream) override {
    return none();
  }
  std::unique_ptr<mesh::Work> iallgather(const Tensor&, const Tensor&, std::span<const std::int64_t>,
                                         mesh::Stream) override {
    return none();
  }
  std::unique_ptr<mesh::Work> ibroadcast(const Tensor&, int, mesh::Stream) override { return none(); }
  std::unique_ptr<mesh::Work> ibarrier() override { return none(); }
  void abort(const std::string&) override {}
  bool dead() const override { return false; }

 private:
  static std::unique_ptr<mesh::Work> none() {
    throw InvalidArgument("bench mailbox: point to point only");
  }
  std::shared_ptr<Mailbox> box_;
  int rank_, size_;
};


}  // namespace

void add_ring_attention_rows(Report& report, const std::vector<int>& ranks, std::int64_t tokens_per_rank, int reps) {
  const std::string per_rank = std::to_string(tokens_per_rank / 1024) + "K/rank";
  // One layer of a small model (4 query heads of 32 over 2 key/value heads): attention dominates.
  ops::model::LlamaConfig config;
  config.d_model = 128;
  config.n_heads = 4;
  config.n_kv_heads = 2;
  config.n_layers = 1;
  config.ffn_dim = 256;
  for (int d : ranks) {
    // One micro-batch: one sequence of d * tokens_per_rank tokens over the ring 0..d-1.
    mesh::Plan plan;
    std::vector<std::uint32_t> ring;
    for (int r = 0; r < d; ++r) ring.push_back(static_cast<std::uint32_t>(r));
    plan.micro_batches.push_back({.slot = 0, .sequences = {0}, .ranks = ring, .rank_capacity = tokens_per_rank + 1});
    plan.rank_queues.assign(static_cast<std::size_t>(d), {0});
    std::vector<std::vector<std::int32_t>> batch(1, std::vector<std::int32_t>(static_cast<std::size_t>(tokens_per_rank * d)));
    for (std::size_t i = 0; i < batch[0].size(); ++i) batch[0][i] = static_cast<std::int32_t>(i * 7 % 256);

    auto gloo = mesh::connect_local(d, 600s);
    auto mailbox = std::make_shared<Mailbox>();
    // Per rep and rank: the micro-batch's time and wait over TCP, the same in memory, the
    // transfers alone.
    const auto cells = static_cast<std::size_t>(reps * d);
    std::vector<double> t_gloo(cells), w_gloo(cells), t_mem(cells), w_mem(cells), t_transfers(cells);
    std::barrier sync(d);
    on_ranks(d, 1, [&](int r) {
      const mesh::RankMicroBatch mb = mesh::build_rank_micro_batch(plan, 0, static_cast<std::uint32_t>(r), batch);
      ops::model::LlamaModel model(config);
      model.init(3);
      MailboxCommunicator in_memory(mailbox, r, d);
      auto micro_batch = [&](mesh::Communicator& comm, int rep, double& t, double& w) {
        sync.arrive_and_wait();
        mesh::RingAttention attention(comm, mb.ring, mb.local_cu, static_cast<std::uint32_t>(rep), 600s);
        model.zero_grad();
        const auto start = Clock::now();
        model.forward(mb.batch, &attention);
        model.backward(1.0);
        t = ms_since(start);
        w = attention.comm_wait_ms();
      };
      mesh::Communicator& comm = *gloo[static_cast<std::size_t>(r)];
      for (int rep = 0; rep < reps; ++rep) {
        const auto cell = static_cast<std::size_t>(rep * d + r);
        micro_batch(comm, rep, t_gloo[cell], w_gloo[cell]);
        micro_batch(in_memory, rep, t_mem[cell], w_mem[cell]);
        // The same transfers alone: D-1 K/V hops (forward), D-1 K/V and D dK/dV hops (backward).
        sync.arrive_and_wait();
        const auto start = Clock::now();
        const int left = (r + d - 1) % d, right = (r + 1) % d;
        const mesh::RingLayout& layout = mb.ring;
        for (int h = 0; h < (d > 1 ? 3 * d - 2 : 0); ++h) {
          const int held = (r - h % d + 2 * d) % d, next = (held + d - 1) % d;
          const Tensor in_k = Tensor::empty({layout.shard_rows(next), config.n_kv_heads, config.head_dim()}, DType::kF32);
          const Tensor in_v = Tensor::empty(in_k.shape(), DType::kF32);
          const Tensor out_k = Tensor::zeros({layout.shard_rows(held), config.n_kv_heads, config.head_dim()}, DType::kF32);
          const Tensor out_v = Tensor::zeros(out_k.shape(), DType::kF32);
          const mesh::Tag tag_k = mesh::ring_tag(1u << 20, 0, 0, h), tag_v = mesh::ring_tag(1u << 20, 0, 1, h);
          std::vector<std::unique_ptr<mesh::Work>> works;
          works.push_back(comm.irecv(in_k, left, tag_k));
          works.push_back(comm.irecv(in_v, left, tag_v));
          works.push_back(comm.isend(out_k, right, tag_k));
          works.push_back(comm.isend(out_v, right, tag_v));
          for (auto& work : works) work->wait(600s);
        }
        t_transfers[cell] = ms_since(start);
      }
    });
    // Per rep: the slowest rank's time, the ranks' mean wait; then the median over reps.
    auto per_rep = [&](const std::vector<double>& cells_of, bool slowest) {
      std::vector<double> values;
      for (int rep = 0; rep < reps; ++rep) {
        const auto first = cells_of.begin() + rep * d;
        values.push_back(slowest ? *std::max_element(first, first + d) : std::accumulate(first, first + d, 0.0) / d);
      }
      return hdp::median(values);
    };
    const double tg = per_rep(t_gloo, true), tm = per_rep(t_mem, true);
    const double wg = per_rep(w_gloo, false), wm = per_rep(w_mem, false), transfers = per_rep(t_transfers, true);
    const double exposed = std::max(0.0, wg - wm);
    report.add(Row{"ring micro-batch fwd+bwd " + per_rank, d, tg, "ms", Baseline{"same, transfers in memory", tm}});
    report.add(Row{"ring micro-batch comm wait " + per_rank, d, wg, "ms", Baseline{"same, transfers in memory", wm}});
    report.add(Row{"ring micro-batch comm exposed " + per_rank, d, exposed, "ms",
                   Baseline{"the same transfers alone", transfers}});
    report.add(Row{"ring micro-batch comm hidden " + per_rank, d,
                   transfers > 0 ? 100.0 * std::max(0.0, 1.0 - exposed / transfers) : 100.0, "%", std::nullopt});
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
    const double rate = static_cast<double>(tokens) / hdp::median(seconds);
    if (n == 1) single = rate;
    report.add(Row{"distributed step " + std::to_string(tokens) + " tokens", n, rate, "tokens/s",
                   single > 0 ? std::optional<Baseline>(Baseline{"1 rank", single}) : std::nullopt});
  }
}

}  // namespace hdp::bench
