// bench/rendezvous: the control plane at cluster scale against one redis-server. Simulates N
// agents (default 1,536 nodes x 8 slots = 12,288 GPUs) in a few threads of one process, each
// doing exactly what `hdp agent` does against the store (register; every lease/3 one heartbeat,
// which also reads the leader and generation keys), with one of them running the real
// MembershipController every 200 ms. Measures:
//   1. time until every node is registered and the first generation with all of them is published;
//   2. time from one node's lease expiring (it stops heartbeating) to the generation without it;
//   3. steady-state Redis commands per second and Redis CPU as a fraction of one core (INFO): with
//      the leader ticking, and then with the heartbeats alone (the leader idle for that window; the
//      simulated agents do not contend for the leader lease, so its expiry meanwhile changes nothing).
// Usage: rendezvous [--nodes 1536] [--slots 8] [--lease-ms 5000] [--threads 8] [--steady-s 10] [--pin]
// --pin puts redis-server on CPU 0 and the simulated agents on the other CPUs, so that the Redis
// CPU figure is not inflated by the load generator sharing its core (on a 2-core machine).
#include <sched.h>

#include <atomic>
#include <iostream>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "agents/embedded_redis.h"
#include "common/log.h"
#include "elastic/job_keys.h"
#include "elastic/leader_lease.h"
#include "elastic/membership_controller.h"
#include "elastic/node_registration.h"
#include "elastic/prefix_store.h"
#include "elastic/redis_store.h"

namespace {

using namespace hdp;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

struct Settings {
  int nodes = 1536;
  int slots = 8;
  int lease_ms = 5000;
  int threads = 8;
  int steady_s = 10;
};

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::shared_ptr<elastic::Store> connect_job(const std::string& url) {
  elastic::RedisStoreOptions options;
  options.retry_timeout = std::chrono::seconds(5);
  return std::make_shared<elastic::PrefixStore>(std::make_shared<elastic::RedisStore>(elastic::parse_redis_url(url)),
                                                elastic::keys::job_namespace("bench"));
}

// Redis' own counters: commands processed and CPU seconds (user + sys).
struct RedisCounters {
  double commands = 0, cpu = 0;
};
RedisCounters read_counters(elastic::RedisStore& redis) {
  auto field = [](const std::string& info, const std::string& name) {
    auto pos = info.find(name + ":");
    return pos == std::string::npos ? 0.0 : std::stod(info.substr(pos + name.size() + 1));
  };
  const std::string stats = redis.command({"INFO", "stats"}, true).str;
  const std::string cpu = redis.command({"INFO", "cpu"}, true).str;
  return {field(stats, "total_commands_processed"), field(cpu, "used_cpu_user") + field(cpu, "used_cpu_sys")};
}

// The simulated agents of one thread: register, then heartbeat on each agent's own schedule. `silenced` stops one node's heartbeats (it "dies").
void run_agents(const std::string& url, const Settings& s, int first, int count, std::atomic<bool>& stop,
                std::atomic<int>& registered, std::atomic<int>& silenced, std::mutex& last_beat_mutex,
                std::vector<Clock::time_point>& last_beat) {
  auto store = connect_job(url);
  const milliseconds lease(s.lease_ms);
  std::vector<elastic::NodeRegistration> nodes;
  for (int i = first; i < first + count; ++i) {
    elastic::NodeLease lease_record{.node = "node" + std::to_string(i), .host = "10.0.0.1", .pid = 1,
                                    .version = "bench", .slots = s.slots};
    for (int slot = 0; slot < s.slots; ++slot) lease_record.healthy.push_back(slot);
    nodes.emplace_back(store, lease_record, lease);
    nodes.back().register_new_incarnation(lease);
    ++registered;
  }
  // Spread each agent's schedule over the period, as independent agents would be.
  std::vector<Clock::time_point> next_beat(count);
  const auto start = Clock::now();
  for (int i = 0; i < count; ++i) next_beat[i] = start + lease / 3 * i / count;
  while (!stop) {
    const auto now = Clock::now();
    auto soonest = now + milliseconds(50);
    for (int i = 0; i < count; ++i) {
      if (first + i == silenced.load()) continue;
      if (now >= next_beat[i]) {
        nodes[i].heartbeat(nodes[i].lease().healthy, 1);
        {
          std::lock_guard lock(last_beat_mutex);
          last_beat[first + i] = Clock::now();
        }
        next_beat[i] += lease / 3;
      }
      soonest = std::min(soonest, next_beat[i]);
    }
    std::this_thread::sleep_until(soonest);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Settings s;
  CLI::App app{"Control-plane scale benchmark: simulated agents against one redis-server"};
  app.add_option("--nodes", s.nodes)->check(CLI::Range(2, 100000));
  app.add_option("--slots", s.slots)->check(CLI::Range(1, 1024));
  app.add_option("--lease-ms", s.lease_ms)->check(CLI::Range(500, 600000));
  app.add_option("--threads", s.threads)->check(CLI::Range(1, 256));
  app.add_option("--steady-s", s.steady_s)->check(CLI::Range(1, 3600));
  bool json = false, pin = false;
  app.add_flag("--json", json);
  app.add_flag("--pin", pin, "redis-server on CPU 0, the simulated agents on the others");
  CLI11_PARSE(app, argc, argv);
  set_log_level("warn");

  agents::EmbeddedRedis redis;
  if (pin) {
    const int cpus = static_cast<int>(std::thread::hardware_concurrency());
    if (cpus < 2) {
      std::cerr << "--pin needs at least 2 CPUs\n";
      return 2;
    }
    cpu_set_t redis_cpu, agent_cpus;
    CPU_ZERO(&redis_cpu);
    CPU_ZERO(&agent_cpus);
    CPU_SET(0, &redis_cpu);
    for (int cpu = 1; cpu < cpus; ++cpu) CPU_SET(cpu, &agent_cpus);
    sched_setaffinity(redis.pid(), sizeof redis_cpu, &redis_cpu);
    sched_setaffinity(0, sizeof agent_cpus, &agent_cpus);  // threads started below inherit it
  }
  elastic::RedisStore monitor(elastic::parse_redis_url(redis.url()));
  auto leader_store = connect_job(redis.url());
  const milliseconds lease(s.lease_ms);

  std::atomic<bool> stop{false};
  std::atomic<int> registered{0}, silenced{-1};
  std::mutex last_beat_mutex;
  std::vector<Clock::time_point> last_beat(s.nodes);
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < s.threads; ++t) {
    const int first = s.nodes * t / s.threads, last = s.nodes * (t + 1) / s.threads;
    threads.emplace_back(run_agents, redis.url(), std::cref(s), first, last - first, std::ref(stop), std::ref(registered),
                         std::ref(silenced), std::ref(last_beat_mutex), std::ref(last_beat));
  }

  // The leader: lease + membership controller, ticking every 200 ms as the agent's leader does.
  elastic::LeaderLease leader(leader_store, "leader/bench", lease / 2);
  elastic::MembershipController controller(leader_store, "leader/bench", {1, 1000000}, milliseconds(1000));
  std::int64_t generation = 0;
  double first_generation_s = -1, registered_s = -1;
  auto tick = [&] {
    leader.try_acquire_or_renew();
    if (auto published = controller.tick()) generation = *published;
  };
  std::size_t members_seen = 0;
  while (first_generation_s < 0) {
    if (Clock::now() - start > std::chrono::seconds(120)) {
      std::cerr << "rendezvous: no generation with all " << s.nodes << " nodes within 120 s (registered "
                << registered << ", largest generation " << members_seen << " nodes)\n";
      std::exit(1);
    }
    tick();
    if (registered_s < 0 && registered == s.nodes) registered_s = seconds(Clock::now() - start);
    auto record = leader_store->get(elastic::keys::generation(generation));
    if (record) {
      members_seen = elastic::decode_generation(*record, "gen").members.size();
      if (members_seen == static_cast<size_t>(s.nodes)) first_generation_s = seconds(Clock::now() - start);
    }
    std::this_thread::sleep_for(milliseconds(200));
  }

  // Steady state: heartbeats and leader ticks; then a window of heartbeats alone (the leader
  // idle), so that the heartbeats' own share is measured, not inferred.
  struct Window {
    double commands_per_s, core_fraction;
  };
  auto measure = [&](bool leader_ticks) {
    const RedisCounters before = read_counters(monitor);
    const auto window_start = Clock::now();
    while (Clock::now() - window_start < std::chrono::seconds(s.steady_s)) {
      if (leader_ticks) tick();
      std::this_thread::sleep_for(milliseconds(200));
    }
    const RedisCounters after = read_counters(monitor);
    const double wall = seconds(Clock::now() - window_start);
    return Window{(after.commands - before.commands) / wall, (after.cpu - before.cpu) / wall};
  };
  const Window steady = measure(true);
  const Window heartbeats_only = measure(false);
  const double commands_per_s = steady.commands_per_s;
  const double redis_core_fraction = steady.core_fraction;

  // One node stops heartbeating: its lease expires lease after its last refresh.
  const int victim = s.nodes / 2;
  silenced = victim;
  Clock::time_point expiry;
  {
    std::this_thread::sleep_for(milliseconds(50));  // let an in-flight heartbeat of the victim finish
    std::lock_guard lock(last_beat_mutex);
    expiry = last_beat[victim] + lease;
  }
  const std::int64_t before_generation = generation;
  while (generation == before_generation) {
    if (Clock::now() - expiry > std::chrono::seconds(30)) {
      std::cerr << "rendezvous: no new generation within 30 s of node" << victim << "'s lease expiry\n";
      std::exit(1);
    }
    tick();
    std::this_thread::sleep_for(milliseconds(200));
  }
  const double next_generation_s = seconds(Clock::now() - expiry);
  stop = true;
  for (auto& thread : threads) thread.join();

  nlohmann::json result = {{"nodes", s.nodes},
                           {"pinned", pin},
                           {"gpus", s.nodes * s.slots},
                           {"lease_ms", s.lease_ms},
                           {"all_registered_s", registered_s},
                           {"first_generation_s", first_generation_s},
                           {"lease_expiry_to_next_generation_s", next_generation_s},
                           {"steady_commands_per_s", commands_per_s},
                           {"steady_redis_core_fraction", redis_core_fraction},
                           {"heartbeats_only_commands_per_s", heartbeats_only.commands_per_s},
                           {"heartbeats_only_redis_core_fraction", heartbeats_only.core_fraction}};
  if (json) {
    std::cout << result.dump(2) << "\n";
  } else {
    std::cout << "nodes " << s.nodes << " (" << s.nodes * s.slots << " GPUs), lease " << s.lease_ms << " ms\n"
              << "  all registered after            " << registered_s << " s\n"
              << "  first generation (all) after    " << first_generation_s << " s (settle window 1 s)\n"
              << "  lease expiry -> next generation " << next_generation_s << " s (target <= 1 s)\n"
              << "  steady state                    " << commands_per_s << " commands/s, "
              << redis_core_fraction * 100 << "% of one Redis core\n"
              << "  heartbeats alone (leader idle)  " << heartbeats_only.commands_per_s << " commands/s, "
              << heartbeats_only.core_fraction * 100 << "% of one Redis core (target <= 5%)\n";
  }
  return 0;
}
