// bench_bootstrap: what one generation's data-plane bootstrap costs, against a real redis-server,
// at N ranks as threads of this process, each with its own Redis connection (as each worker has).
//
// A generation, as the trainer's is: every rank connects its two communicators, "main" (one
// address record written, the ring neighbours connected) and "ckpt" (one record written; its
// pairs connect on the first save, as the trainer's do: mesh::Connect::kOnFirstUse), then a plan's rings exchange a message with their neighbours (rings of 2 to 16 ranks drawn from a seeded shuffle: the peers of
// a step's ring attention), then one allreduce runs (ZeRO's ring). A rank is ready when its last
// message of all that arrived. Measured:
//   - ready: from the common start until the last rank is ready (both channels connected, its plan
//     ring exchanged); then how long the first allreduce on each channel took (2(N-1) hops each);
//   - Redis commands and bytes out of Redis (INFO stats: total_commands_processed,
//     total_net_output_bytes), before and after, less the INFO calls themselves;
//   - beside it, at the N given by --full-mesh-max and below, the baseline measured in the same
//     run: Gloo 0.5.0's full-mesh rendezvous (connectFullMesh through the same Redis), which is
//     what hdp's bootstrap was until it was replaced (docs/data-plane.md).
//
//   bench_bootstrap [--ranks 64,256,1024] [--full-mesh-max 64] [--json]
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <numeric>
#include <random>
#include <thread>

#include "agents/embedded_redis.h"
#include "bench/report.h"
#include "elastic/prefix_store.h"
#include "elastic/redis_store.h"
#include "elastic/redis_url.h"
#include "mesh/comm/communicator_factory.h"

namespace hdp::bench {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using ops::DType;
using ops::Tensor;

struct Counters {
  double commands = 0, bytes_out = 0;
};

Counters read_counters(elastic::RedisStore& redis) {
  const std::string stats = redis.command({"INFO", "stats"}, true).str;
  auto field = [&](const std::string& name) {
    const auto pos = stats.find(name + ":");
    return pos == std::string::npos ? 0.0 : std::stod(stats.substr(pos + name.size() + 1));
  };
  return {field("total_commands_processed"), field("total_net_output_bytes")};
}

struct Figures {
  double wall_s = 0;
  double commands = 0;
  double bytes_out = 0;
  // hdp's generation only: when the last rank had connected (both connect() calls returned), had
  // exchanged its plan ring's messages (ready), and had finished the allreduce on each channel,
  // from the common start.
  double connected_s = 0, ring_s = 0, allreduce_s = 0, ckpt_s = 0;
};

// Per rank, the moments its phases ended.
struct Phases {
  std::vector<Clock::time_point> connected, ring, allreduce, ckpt;
  explicit Phases(int n)
      : connected(static_cast<std::size_t>(n)), ring(connected.size()), allreduce(connected.size()),
        ckpt(connected.size()) {}
};

std::shared_ptr<elastic::RedisStore> redis_connection(const std::string& url) {
  elastic::RedisStoreOptions options;
  options.retry_timeout = 30s;
  return std::make_shared<elastic::RedisStore>(elastic::parse_redis_url(url), options);
}

// Runs `body(rank)` on n threads that first open their Redis connections, then start together;
// returns the wall time from the common start to the last one's end and Redis' counters over it.
Figures measure(const std::string& url, int n, const std::function<void(int, std::shared_ptr<elastic::Store>)>& body,
                Phases* phases = nullptr) {
  auto monitor = redis_connection(url);
  std::vector<std::shared_ptr<elastic::Store>> stores;
  for (int r = 0; r < n; ++r) stores.push_back(redis_connection(url));
  for (auto& s : stores) s->get("warm-up");  // the connection is made before the clock starts
  std::atomic<int> failures{0};
  std::string first_error;
  std::mutex error_mutex;
  std::barrier start_line(n + 1);
  std::vector<Clock::time_point> ends(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      start_line.arrive_and_wait();
      try {
        body(r, stores[static_cast<std::size_t>(r)]);
      } catch (const std::exception& e) {
        std::lock_guard lock(error_mutex);
        if (failures++ == 0) first_error = "rank " + std::to_string(r) + ": " + e.what();
      }
      ends[static_cast<std::size_t>(r)] = Clock::now();
    });
  }
  const Counters before = read_counters(*monitor);
  const auto start = Clock::now();
  start_line.arrive_and_wait();
  for (auto& t : threads) t.join();
  const Counters after = read_counters(*monitor);
  if (failures > 0) throw std::runtime_error(std::to_string(failures.load()) + " rank(s) failed; " + first_error);
  Figures f;
  f.wall_s = std::chrono::duration<double>(*std::max_element(ends.begin(), ends.end()) - start).count();
  f.commands = after.commands - before.commands - 1;  // less the second INFO itself
  f.bytes_out = after.bytes_out - before.bytes_out;
  if (phases) {
    auto last = [&](const std::vector<Clock::time_point>& at) {
      return std::chrono::duration<double>(*std::max_element(at.begin(), at.end()) - start).count();
    };
    f.connected_s = last(phases->connected);
    f.ring_s = last(phases->ring);
    f.allreduce_s = last(phases->allreduce);
    f.ckpt_s = last(phases->ckpt);
  }
  return f;
}

// A plan's rings: the ranks shuffled (seeded) and cut into rings of 2 to 16. ring_of[r] lists r's
// ring; every rank is in exactly one.
std::vector<std::vector<int>> plan_rings(int n, std::uint64_t seed) {
  std::vector<int> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<std::vector<int>> ring_of(static_cast<std::size_t>(n));
  std::size_t at = 0;
  while (at < order.size()) {
    const std::size_t size = std::min<std::size_t>(order.size() - at, std::size_t{2} << (rng() % 4));
    const std::vector<int> ring(order.begin() + static_cast<std::ptrdiff_t>(at),
                                order.begin() + static_cast<std::ptrdiff_t>(at + size));
    for (int r : ring) ring_of[static_cast<std::size_t>(r)] = ring;
    at += size;
  }
  return ring_of;
}

// One generation of hdp's bootstrap on `n` ranks.
Figures hdp_generation(const std::string& url, int n, int generation) {
  const auto rings = plan_rings(n, static_cast<std::uint64_t>(generation));
  const std::string prefix = "bench/gen:" + std::to_string(generation) + ":boot:";
  std::vector<std::unique_ptr<mesh::Communicator>> keep(static_cast<std::size_t>(n)), keep_ckpt(keep.size());
  std::barrier done(n);
  Phases phases(n);
  const auto i = [](int r) { return static_cast<std::size_t>(r); };
  Figures f = measure(url, n, [&](int r, std::shared_ptr<elastic::Store> store) {
    elastic::Bootstrap boot{.generation = generation, .rank = r, .world_size = n, .advertise_address = "127.0.0.1",
                            .store = std::make_shared<elastic::PrefixStore>(store, prefix),
                            .group = "bench/" + prefix};
    auto comm = mesh::connect_communicator(boot, "main", 120s);
    keep_ckpt[i(r)] = mesh::connect_communicator(boot, "ckpt", 120s, mesh::Connect::kOnFirstUse);
    phases.connected[i(r)] = Clock::now();
    // The plan's ring: one 1 KiB message to the next rank of the ring, one from the previous.
    const auto& ring = rings[static_cast<std::size_t>(r)];
    if (ring.size() > 1) {
      const auto me = static_cast<std::size_t>(std::find(ring.begin(), ring.end(), r) - ring.begin());
      const int next = ring[(me + 1) % ring.size()], prev = ring[(me + ring.size() - 1) % ring.size()];
      const Tensor out = Tensor::from_vector(std::vector<float>(256, static_cast<float>(r)), {256});
      const Tensor in = Tensor::zeros({256}, DType::kF32);
      auto recv = comm->irecv(in, prev, 7);
      auto send = comm->isend(out, next, 7);
      recv->wait(120s);
      send->wait(120s);
      if (in.data<float>()[0] != static_cast<float>(prev)) throw std::runtime_error("ring message garbled");
    }
    phases.ring[i(r)] = Clock::now();
    // ZeRO's ring.
    if (comm->allreduce_sum(std::int64_t{1}) != n) throw std::runtime_error("allreduce gave a wrong sum");
    phases.allreduce[i(r)] = Clock::now();
    // The first save's ring on the checkpoint channel (trainer::CommunicatorGroup: allreduces).
    if (keep_ckpt[i(r)]->allreduce_sum(std::int64_t{1}) != n) throw std::runtime_error("ckpt allreduce gave a wrong sum");
    phases.ckpt[i(r)] = Clock::now();
    keep[static_cast<std::size_t>(r)] = std::move(comm);
    done.arrive_and_wait();  // nobody closes while a peer may still read from it
  }, &phases);
  return f;
}

// Gloo 0.5.0's full mesh through the same Redis (the baseline; hdp's bootstrap before).
class RedisGlooStore final : public gloo::rendezvous::Store {
 public:
  RedisGlooStore(std::shared_ptr<elastic::Store> store, std::string prefix)
      : store_(std::move(store)), prefix_(std::move(prefix)) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_->set(prefix_ + key, std::string_view(data.data(), data.size()));
  }
  std::vector<char> get(const std::string& key) override {
    wait({key});
    const auto value = store_->get(prefix_ + key);
    if (!value) throw std::runtime_error("full mesh: key " + key + " vanished");
    return {value->begin(), value->end()};
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, 120s); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> full;
    for (const auto& k : keys) full.push_back(prefix_ + k);
    store_->wait(full, timeout);
  }

 private:
  std::shared_ptr<elastic::Store> store_;
  std::string prefix_;
};

Figures full_mesh_generation(const std::string& url, int n, int generation) {
  const std::string prefix = "bench/full-mesh:" + std::to_string(generation) + "/";
  std::vector<std::shared_ptr<gloo::rendezvous::Context>> keep(static_cast<std::size_t>(n));
  std::barrier done(n);
  return measure(url, n, [&](int r, std::shared_ptr<elastic::Store> store) {
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(r, n);
    context->setTimeout(120s);
    RedisGlooStore gloo_store(std::move(store), prefix);
    context->connectFullMesh(gloo_store, device);
    keep[static_cast<std::size_t>(r)] = std::move(context);
    done.arrive_and_wait();
  });
}

std::vector<int> parse_ranks(const std::string& text) {
  std::vector<int> ranks;
  std::size_t at = 0;
  while (at <= text.size()) {
    const auto comma = text.find(',', at);
    const std::string item = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    const int n = std::stoi(item);
    if (n < 2) throw std::invalid_argument("--ranks: " + item + " is below 2");
    ranks.push_back(n);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return ranks;
}

}  // namespace
}  // namespace hdp::bench

int main(int argc, char** argv) {
  using namespace hdp::bench;
  CLI::App app{"Data-plane bootstrap per generation: hdp's (one record per rank) vs Gloo's full mesh, through Redis"};
  std::string ranks_text = "64,256,1024";
  int full_mesh_max = 64;
  bool json = false;
  app.add_option("--ranks", ranks_text, "comma-separated rank counts");
  app.add_option("--full-mesh-max", full_mesh_max, "run Gloo's full-mesh baseline at rank counts up to this");
  app.add_flag("--json", json, "one JSON array of rows");
  CLI11_PARSE(app, argc, argv);
  try {
    const std::vector<int> counts = parse_ranks(ranks_text);
    // Every rank: a Redis connection, a listening socket and its connections.
    rlimit files{};
    getrlimit(RLIMIT_NOFILE, &files);
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);

    hdp::agents::EmbeddedRedis redis;
    Report report;
    std::optional<double> first_commands_per_rank, first_bytes_per_rank;
    int first_n = 0;
    int generation = 1;
    for (const int n : counts) {
      std::optional<Figures> baseline;
      if (n <= full_mesh_max) baseline = full_mesh_generation(redis.url(), n, generation);
      const Figures f = hdp_generation(redis.url(), n, generation);
      ++generation;
      auto with = [&](const char* name, double base) {
        return baseline ? std::optional<Baseline>(Baseline{std::string("gloo full mesh ") + name, base}) : std::nullopt;
      };
      // Ready: both channels connected and the plan's rings exchanged (hdp); the full mesh
      // connected (Gloo, one channel: the old path built two per generation).
      report.add(Row{"all ranks ready", n, f.ring_s, "s", with("wall (one channel)", baseline ? baseline->wall_s : 0)});
      report.add(Row{"  last connect() returned", n, f.connected_s, "s", std::nullopt});
      report.add(Row{"  then the first allreduce (ZeRO ring)", n, f.allreduce_s - f.ring_s, "s", std::nullopt});
      report.add(Row{"  then the first ckpt allreduce", n, f.ckpt_s - f.allreduce_s, "s", std::nullopt});
      // Redis over the whole generation, the lazy ckpt connections included.
      report.add(Row{"redis commands per rank", n, f.commands / n, "commands",
                     with("commands per rank (one channel)", baseline ? baseline->commands / n : 0)});
      report.add(Row{"redis bytes out per rank", n, f.bytes_out / n, "bytes",
                     with("bytes out per rank (one channel)", baseline ? baseline->bytes_out / n : 0)});
      if (!first_commands_per_rank) {
        first_commands_per_rank = f.commands / n;
        first_bytes_per_rank = f.bytes_out / n;
        first_n = n;
      } else {
        // Linear growth: the per-rank cost at n against the per-rank cost at the smallest n.
        report.add(Row{"commands per rank vs " + std::to_string(first_n) + " ranks", n,
                       (f.commands / n) / *first_commands_per_rank, "x", std::nullopt});
        report.add(Row{"bytes per rank vs " + std::to_string(first_n) + " ranks", n,
                       (f.bytes_out / n) / *first_bytes_per_rank, "x", std::nullopt});
      }
    }
    report.print(std::cout, json);
  } catch (const std::exception& e) {
    std::cerr << "bench_bootstrap: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
