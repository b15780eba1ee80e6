// bench/comm: the communicator's allreduce and reduce-scatter bus bandwidth (TcpCommunicator,
// hdp's ring collectives over hdp's own TCP transport), beside Gloo 0.5.0's own ring allreduce on
// a full-mesh Gloo context and beside memcpy, all measured in the same run.
//
// Ranks are threads of this one process, each with its own network thread and TCP connections
// over loopback, as mesh::connect_local builds them (Gloo's baseline likewise, one device each). So the figures measure the
// collectives' software path and loopback TCP on this machine's cores, not a network; with more
// ranks than cores the ranks share CPUs.
//
//   bus bandwidth = bytes * 2(n-1)/n / time (allreduce), bytes * (n-1)/n / time (reduce-scatter)
//   memcpy        = bytes / time of one memcpy on one thread
//
// Each figure is the median over --reps timed repetitions (after one warm-up), a repetition timed
// on rank 0 from a barrier of the rank threads to the next.
//
// Then the model's data plane (bench/comm_model.h): ring attention at --ring-tokens per rank and
// the distributed step on a --step-tokens batch, at 1 and each of --ranks.
//
// Usage: bench_comm [--ranks 2,4] [--sizes-mib 1,16,64] [--reps 5] [--ring-tokens 16384]
//                   [--step-tokens 8192] [--collectives-only] [--json]
#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <barrier>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/comm_model.h"
#include "bench/report.h"
#include "common/median.h"
#include "mesh/comm/communicator_factory.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using hdp::bench::Baseline;
using hdp::bench::Report;
using hdp::bench::Row;

// Runs body(rank) on n threads, `reps` + 1 times (the first is a warm-up); returns the median
// seconds of a repetition, timed on rank 0 between barriers of all ranks.
double time_ranks(int n, int reps, const std::function<void(int)>& body) {
  std::barrier sync(n);
  std::vector<double> seconds;
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      for (int i = 0; i <= reps; ++i) {
        sync.arrive_and_wait();
        const auto start = Clock::now();
        body(r);
        sync.arrive_and_wait();
        if (r == 0 && i > 0) seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
      }
    });
  }
  for (auto& t : threads) t.join();
  return hdp::median(seconds);
}

double memcpy_seconds(std::size_t bytes, int reps) {
  std::vector<char> a(bytes, 1), b(bytes, 2);
  std::vector<double> seconds;
  for (int i = 0; i <= reps; ++i) {
    const auto start = Clock::now();
    std::memcpy(b.data(), a.data(), bytes);
    if (i > 0) seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  if (b[bytes / 2] != 1) throw std::runtime_error("memcpy did not copy");
  return hdp::median(seconds);
}

// Gloo's rendezvous needs a store whose get blocks: a map under a mutex for the baseline's threads.
class BlockingStore final : public gloo::rendezvous::Store {
 public:
  void set(const std::string& key, const std::vector<char>& data) override {
    std::lock_guard lock(mutex_);
    values_[key] = data;
    changed_.notify_all();
  }
  std::vector<char> get(const std::string& key) override {
    wait({key});
    std::lock_guard lock(mutex_);
    return values_.at(key);
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, 60s); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    std::unique_lock lock(mutex_);
    const bool all = changed_.wait_for(lock, timeout, [&] {
      return std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return values_.contains(k); });
    });
    if (!all) throw std::runtime_error("bench store: keys missing after the timeout");
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::vector<char>> values_;
};

std::vector<std::shared_ptr<gloo::rendezvous::Context>> gloo_contexts(int n) {
  BlockingStore store;
  std::vector<std::shared_ptr<gloo::rendezvous::Context>> contexts(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      gloo::transport::tcp::attr attr;
      attr.hostname = "127.0.0.1";
      auto device = gloo::transport::tcp::CreateDevice(attr);
      auto context = std::make_shared<gloo::rendezvous::Context>(r, n);
      context->setTimeout(60s);
      context->connectFullMesh(store, device);
      contexts[static_cast<std::size_t>(r)] = std::move(context);
    });
  }
  for (auto& t : threads) t.join();
  return contexts;
}

std::string size_name(int mib) { return std::to_string(mib) + "MiB"; }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Communicator bandwidth: hdp's ring collectives vs Gloo's ring allreduce vs memcpy"};
  std::vector<int> ranks_list{2, 4};
  std::vector<int> sizes_mib{1, 16, 64};
  int reps = 5;
  bool json = false;
  std::int64_t ring_tokens = 16384, step_tokens = 8192;
  bool collectives_only = false;
  app.add_option("--ranks", ranks_list, "Rank counts (threads of this process)")->delimiter(',')->check(CLI::Range(2, 64));
  app.add_option("--sizes-mib", sizes_mib, "Buffer sizes in MiB of f32")->delimiter(',')->check(CLI::Range(1, 4096));
  app.add_option("--reps", reps, "Timed repetitions per figure (median)")->check(CLI::Range(1, 1000));
  app.add_flag("--json", json, "Print rows as JSON");
  app.add_option("--ring-tokens", ring_tokens, "Ring attention: tokens per rank of the sharded sequence")
      ->check(CLI::Range(std::int64_t{64}, std::int64_t{1} << 20));
  app.add_option("--step-tokens", step_tokens, "Distributed step: tokens of the global batch")
      ->check(CLI::Range(std::int64_t{256}, std::int64_t{1} << 22));
  app.add_flag("--collectives-only", collectives_only, "Skip the ring attention and distributed step rows");
  CLI11_PARSE(app, argc, argv);

  Report report;
  std::map<int, double> memcpy_gbs;
  for (int mib : sizes_mib) {
    const std::size_t bytes = static_cast<std::size_t>(mib) << 20;
    memcpy_gbs[mib] = static_cast<double>(bytes) / memcpy_seconds(bytes, reps) / 1e9;
    report.add(Row{"memcpy " + size_name(mib), 1, memcpy_gbs[mib], "GB/s", std::nullopt});
  }
  for (int n : ranks_list) {
    auto comms = hdp::mesh::connect_local(n, 120s);
    auto contexts = gloo_contexts(n);
    for (int mib : sizes_mib) {
      const std::size_t bytes = static_cast<std::size_t>(mib) << 20;
      const std::int64_t elements = static_cast<std::int64_t>(bytes / sizeof(float));
      const double size = static_cast<double>(bytes);
      const double ring = 2.0 * (n - 1) / n, half = static_cast<double>(n - 1) / n;
      const Baseline memcpy_row{"memcpy " + size_name(mib), memcpy_gbs[mib]};

      std::vector<hdp::ops::Tensor> buffers, outputs;
      std::vector<std::int64_t> counts;
      for (int r = 0; r < n; ++r) {
        buffers.push_back(hdp::ops::Tensor::zeros({elements}, hdp::ops::DType::kF32));
        counts.push_back(elements / n + (r < elements % n ? 1 : 0));
      }
      for (int r = 0; r < n; ++r) outputs.push_back(hdp::ops::Tensor::zeros({counts[static_cast<std::size_t>(r)]}, hdp::ops::DType::kF32));

      const double gloo_s = time_ranks(n, reps, [&](int r) {
        gloo::AllreduceOptions options(contexts[static_cast<std::size_t>(r)]);
        options.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
        options.setOutput(buffers[static_cast<std::size_t>(r)].data<float>(), static_cast<std::size_t>(elements));
        options.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, std::size_t)>(&gloo::sum<float>));
        options.setTag(1);
        gloo::allreduce(options);
      });
      const double hdp_s = time_ranks(n, reps, [&](int r) {
        comms[static_cast<std::size_t>(r)]->allreduce(buffers[static_cast<std::size_t>(r)], hdp::mesh::ReduceOp::kSum);
      });
      const double rs_s = time_ranks(n, reps, [&](int r) {
        comms[static_cast<std::size_t>(r)]->reduce_scatter(buffers[static_cast<std::size_t>(r)],
                                                            outputs[static_cast<std::size_t>(r)], counts,
                                                            hdp::mesh::ReduceOp::kSum);
      });
      const double gloo_bw = size * ring / gloo_s / 1e9;
      report.add(Row{"gloo ring allreduce busbw " + size_name(mib), n, gloo_bw, "GB/s", memcpy_row});
      report.add(Row{"allreduce busbw " + size_name(mib), n, size * ring / hdp_s / 1e9, "GB/s",
                     Baseline{"gloo ring allreduce busbw " + size_name(mib), gloo_bw}});
      report.add(Row{"reduce_scatter busbw " + size_name(mib), n, size * half / rs_s / 1e9, "GB/s", memcpy_row});
    }
  }
  if (!collectives_only) {
    hdp::bench::add_ring_attention_rows(report, ranks_list, ring_tokens, reps);
    hdp::bench::add_step_rows(report, ranks_list, step_tokens, reps);
  }
  report.print(std::cout, json);
  return 0;
}
