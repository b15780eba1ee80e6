// bench/rendezvous: the control plane at cluster scale against one redis-server. Simulates N
// agents (default 1,536 nodes x 8 slots = 12,288 GPUs) each with its own Redis connection, doing on
// the wire what a follower `hdp agent` does (bench/sim_agents.h: a heartbeat of one round trip
// every heartbeat period, derived from the lease by elastic/lease_timing.h, and between heartbeats
// a blocking read of the `generations` stream), with the real MembershipController ticking as the
// leader does. Workers add nothing here: each agent relays the generation to its workers over a
// unix socket (they hold no Redis connection while they train; tests/agents/notification_test.cc).
// Measures:
//   1. time until every node is registered and the first generation with all of them is published;
//   2. steady-state Redis commands per second, Redis CPU as a fraction of one core (INFO), Redis
//      connections and clients blocked on the stream: with the leader ticking, then with the agents
//      alone (the leader idle for that window); and, as a yardstick measured in the same run, the
//      Redis CPU of one plain GET round trip, so that the steady state is also given in round
//      trips per second (a figure a slower or shared core does not move);
//   3. after one agent dies (its connection closed, its heartbeats stopped): the time from its lease
//      expiring to the generation without it (detection + publication), to every live agent
//      knowing that generation (notification), and to every live agent knowing its record: derived
//      from the stream entry's delta over the record it holds (no read; the harness checks the
//      delta once, byte for byte), or read (gen:<g>, about 115 bytes per node).
// Usage: rendezvous [--nodes 1536] [--slots 8] [--lease-ms 5000] [--threads 8] [--steady-s 10] [--pin]
//                   [--no-records | --first-record-given] [--json]
// --no-records: the simulated agents learn each generation's number but know no record.
// --first-record-given: the first generation's record is given to each agent rather than read
// (every agent reads it once at a job's start: at 12,500 nodes, 18 GB through this one bench
// process take longer than the rest is about; docs/performance.md); the changes after it are
// still derived or read as the agent does.
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
#include "bench/sim_agents.h"
#include "elastic/job_keys.h"
#include "elastic/lease_timing.h"
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

// Agents that know generation g's record: read it, derived it from the stream's delta, or were given it.
int records_known(const bench::SimulatedAgents::Known& known) {
  return known.records_read + known.records_derived + known.records_given;
}

// The harness's own connections (registration, the leader, the monitor) wait out a busy server:
// at 12,500 nodes the agents' reads of a new generation's record keep Redis busy for seconds.
elastic::RedisStoreOptions harness_options() {
  elastic::RedisStoreOptions options;
  options.command_timeout = std::chrono::seconds(60);
  options.retry_timeout = std::chrono::seconds(120);
  return options;
}

std::shared_ptr<elastic::Store> connect_job(const std::string& url) {
  return std::make_shared<elastic::PrefixStore>(
      std::make_shared<elastic::RedisStore>(elastic::parse_redis_url(url), harness_options()),
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

// Registers nodes [first, first + count) as agents do (claim, lease, join announcement) on one
// connection of its own, and returns their lease keys. The registration's TTL is long: the
// simulated agents' heartbeats (PEXPIRE to the lease) start once every node is registered.
std::vector<std::string> register_nodes(const std::string& url, const Settings& s, int first, int count,
                                        std::atomic<int>& registered) {
  auto store = connect_job(url);
  std::vector<std::string> keys;
  for (int i = first; i < first + count; ++i) {
    elastic::NodeLease lease_record{.node = "node" + std::to_string(i), .host = "10.0.0.1", .pid = 1,
                                    .version = "bench", .slots = s.slots};
    for (int slot = 0; slot < s.slots; ++slot) lease_record.healthy.push_back(slot);
    elastic::NodeRegistration node(store, lease_record, std::chrono::minutes(10));
    node.register_new_incarnation(milliseconds(s.lease_ms));
    keys.push_back(elastic::keys::lease(node.lease().node, node.lease().incarnation));
    ++registered;
  }
  return keys;
}

// INFO clients: connected and blocked clients.
struct Clients {
  double connected = 0, blocked = 0;
};
Clients read_clients(elastic::RedisStore& redis) {
  const std::string info = redis.command({"INFO", "clients"}, true).str;
  auto field = [&](const std::string& name) {
    auto pos = info.find(name + ":");
    return pos == std::string::npos ? 0.0 : std::stod(info.substr(pos + name.size() + 1));
  };
  return {field("connected_clients"), field("blocked_clients")};
}

}  // namespace

int main(int argc, char** argv) {
  Settings s;
  CLI::App app{"Control-plane scale benchmark: simulated agents against one redis-server"};
  app.add_option("--nodes", s.nodes)->check(CLI::Range(2, 100000));
  app.add_option("--slots", s.slots)->check(CLI::Range(1, 1024));
  app.add_option("--lease-ms", s.lease_ms)->check(CLI::Range(500, 600000));
  app.add_option("--threads", s.threads, "connections that register the nodes")->check(CLI::Range(1, 256));
  app.add_option("--steady-s", s.steady_s)->check(CLI::Range(1, 3600));
  bool json = false, pin = false, no_records = false, first_record_given = false;
  app.add_flag("--json", json);
  app.add_flag("--no-records", no_records, "the simulated agents do not read each new generation's record");
  app.add_flag("--first-record-given", first_record_given, "the first record is given to the agents, not read");
  app.add_flag("--pin", pin, "redis-server on CPU 0, the simulated agents on the others");
  CLI11_PARSE(app, argc, argv);
  set_log_level("warn");
  const milliseconds lease(s.lease_ms);
  const elastic::LeaseTiming timing = elastic::derive_lease_timing(lease, std::nullopt);

  // One connection per agent, the leader's, the monitor's and the registering ones.
  agents::EmbeddedRedis redis(agents::EmbeddedRedisOptions{
      .extra_args = {"--maxclients", std::to_string(s.nodes + s.threads + 100)}});
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
  elastic::RedisStore monitor(elastic::parse_redis_url(redis.url()), harness_options());
  auto leader_store = connect_job(redis.url());

  // Registration, on --threads connections that are closed once every node is registered.
  const auto start = Clock::now();
  std::atomic<int> registered{0};
  std::vector<std::vector<std::string>> slices(static_cast<std::size_t>(s.threads));
  {
    std::vector<std::thread> threads;
    for (int t = 0; t < s.threads; ++t) {
      const int first = s.nodes * t / s.threads, last = s.nodes * (t + 1) / s.threads;
      threads.emplace_back([&, t, first, last] {
        slices[static_cast<std::size_t>(t)] = register_nodes(redis.url(), s, first, last - first, registered);
      });
    }
    for (auto& thread : threads) thread.join();
  }
  const double registered_s = seconds(Clock::now() - start);
  std::vector<std::string> lease_keys;
  for (auto& slice : slices) lease_keys.insert(lease_keys.end(), slice.begin(), slice.end());
  const auto prefix = elastic::keys::job_namespace("bench");
  bench::SimulatedAgents agents(
      {.port = redis.port(), .prefix = prefix, .lease = lease, .heartbeat = timing.heartbeat, .read_records = !no_records,
       .read_first_record = !first_record_given},
      lease_keys);

  // The leader: lease + membership controller, ticking as the agent's leader does.
  elastic::LeaderLease leader(leader_store, "leader/bench", timing.leader_lease);
  elastic::MembershipController controller(leader_store, "leader/bench", {1, 1000000}, milliseconds(1000),
                                           timing.rejoin_window, timing.heartbeat);
  std::int64_t generation = 0;
  Clock::time_point published_at{};  // when the tick that published `generation` returned
  auto tick = [&] {
    leader.try_acquire_or_renew();
    if (auto published = controller.tick(generation)) {
      generation = *published;
      published_at = Clock::now();
    }
  };
  double first_generation_s = -1;
  std::size_t members_seen = 0;
  while (first_generation_s < 0) {
    if (Clock::now() - start > std::chrono::seconds(300)) {
      std::cerr << "rendezvous: no generation with all " << s.nodes << " nodes within 300 s (largest: " << members_seen
                << " nodes)\n";
      return 1;
    }
    tick();
    if (auto record = leader_store->get(elastic::keys::generation(generation))) {
      members_seen = elastic::decode_generation(*record, "gen").members.size();
      if (members_seen == static_cast<std::size_t>(s.nodes)) first_generation_s = seconds(Clock::now() - start);
    }
    std::this_thread::sleep_for(timing.leader_tick);
  }
  // Every agent reads that generation's record (keeping the leader ticking meanwhile).
  const auto first_published = published_at;
  double first_records_s = -1;
  std::size_t record_bytes = 0;
  if (!no_records) {
    bench::SimulatedAgents::Known known;
    while (records_known(known = agents.known(generation)) < agents.live()) {
      if (Clock::now() - first_published > std::chrono::seconds(600)) {
        std::cerr << "rendezvous: only " << records_known(known) << " of " << agents.live()
                  << " agents knew the first generation's record after 600 s\n";
        return 1;
      }
      tick();
      std::this_thread::sleep_for(timing.leader_tick);
    }
    // Given records are not a measurement: -1.
    first_records_s = first_record_given ? -1 : seconds(known.last_record - first_published);
    record_bytes = known.record_bytes;
  }
  const double redis_memory_peak = [&] {
    const std::string info = monitor.command({"INFO", "memory"}, true).str;
    auto pos = info.find("used_memory_peak:");
    return pos == std::string::npos ? 0.0 : std::stod(info.substr(pos + 17));
  }();

  // Steady state: the agents and the leader's ticks; then a window of the agents alone (the leader
  // idle), so that their own share is measured, not inferred.
  struct Window {
    double commands_per_s, core_fraction, connections, blocked;
  };
  auto measure = [&](bool leader_ticks) {
    const RedisCounters before = read_counters(monitor);
    const auto window_start = Clock::now();
    Clients most{};
    while (Clock::now() - window_start < std::chrono::seconds(s.steady_s)) {
      if (leader_ticks) tick();
      const Clients now = read_clients(monitor);
      most = {std::max(most.connected, now.connected), std::max(most.blocked, now.blocked)};
      std::this_thread::sleep_for(timing.leader_tick);
    }
    const RedisCounters after = read_counters(monitor);
    const double wall = seconds(Clock::now() - window_start);
    return Window{(after.commands - before.commands) / wall, (after.cpu - before.cpu) / wall, most.connected, most.blocked};
  };
  const Window steady = measure(true);
  const Window agents_only = measure(false);
  // The yardstick, in the same run: Redis' CPU for one plain GET round trip (one connection, one
  // command at a time), the agents' share (the window above) subtracted. A core that is slower or
  // shared (a VM's neighbours) costs more per round trip and more per steady second alike, so the
  // steady state in round trips per second is what holds from one run, day or machine to another.
  const double round_trip_cpu_s = [&] {
    constexpr int kTrips = 20000;
    const RedisCounters before = read_counters(monitor);
    const auto start = Clock::now();
    for (int i = 0; i < kTrips; ++i) monitor.command({"GET", "calibration"}, true);
    const RedisCounters after = read_counters(monitor);
    const double wall = seconds(Clock::now() - start);
    return std::max(0.0, (after.cpu - before.cpu) - agents_only.core_fraction * wall) / kTrips;
  }();
  const double steady_trips = round_trip_cpu_s > 0 ? steady.core_fraction / round_trip_cpu_s : 0;
  const double agents_only_trips = round_trip_cpu_s > 0 ? agents_only.core_fraction / round_trip_cpu_s : 0;

  // One agent dies: its lease expires `lease` after its last refresh; the leader publishes the
  // generation without it, and every live agent must learn it.
  const auto expiry = agents.kill(s.nodes / 2) + lease;
  const std::int64_t before_generation = generation;
  for (tick(); generation == before_generation; tick()) {
    if (Clock::now() - expiry > std::chrono::seconds(300)) {
      std::cerr << "rendezvous: no new generation within 300 s of the lease's expiry\n";
      return 1;
    }
    std::this_thread::sleep_for(timing.leader_tick);
  }
  const auto published = published_at;
  bench::SimulatedAgents::Known known;
  while ((known = agents.known(generation)).agents < agents.live()) {
    if (Clock::now() - published > std::chrono::seconds(60)) {
      std::cerr << "rendezvous: only " << known.agents << " of " << agents.live() << " agents knew generation "
                << generation << " 60 s after it was published\n";
      return 1;
    }
    std::this_thread::sleep_for(milliseconds(5));
  }
  const double detect_publish_s = seconds(published - expiry);
  const double every_agent_knows_s = seconds(known.last - expiry);
  // Then each agent knows the generation's record (the agent's membership check): derived from the
  // stream entry's delta, or read.
  while (!no_records && records_known(known = agents.known(generation)) < agents.live()) {
    if (Clock::now() - published > std::chrono::seconds(600)) {
      std::cerr << "rendezvous: only " << records_known(known) << " of " << agents.live()
                << " agents knew the record of generation " << generation << " 600 s after it was published\n";
      return 1;
    }
    std::this_thread::sleep_for(milliseconds(5));
  }
  const double every_agent_read_record_s = no_records ? -1 : seconds(known.last_record - expiry);
  const int change_records_read = known.records_read, change_records_derived = known.records_derived;
  // The delta every agent applied (without reading), checked once here: applied to the record
  // before, it gives the record the leader stored, byte for byte.
  bool delta_checked = false;
  if (!no_records && change_records_derived > 0) {
    const auto entry = leader_store->stream_tail(elastic::keys::kGenerationLog, 1);
    auto field = [&](const char* name) -> std::string {
      for (const auto& [k, v] : entry.at(0).fields) if (k == name) return v;
      return "";
    };
    const auto stored = leader_store->get(elastic::keys::generation(generation));
    const auto before = leader_store->get(elastic::keys::generation(before_generation));
    if (!stored || !before) {
      std::cerr << "rendezvous: the records of generations " << before_generation << " and " << generation << " are not both stored\n";
      return 1;
    }
    try {
      const elastic::Generation derived =
          elastic::apply_delta(elastic::decode_generation(*before, "gen"), generation, field("delta"), "generations");
      if (elastic::encode(derived) != *stored || field("digest") != elastic::record_digest(*stored)) {
        throw InvalidArgument("it gives another record");
      }
    } catch (const InvalidArgument& e) {
      std::cerr << "rendezvous: the delta of generation " << generation << " does not give its record: " << e.what() << "\n";
      return 1;
    }
    delta_checked = true;
  }

  nlohmann::json result = {{"nodes", s.nodes},
                           {"pinned", pin},
                           {"gpus", s.nodes * s.slots},
                           {"lease_ms", s.lease_ms},
                           {"heartbeat_ms", timing.heartbeat.count()},
                           {"all_registered_s", registered_s},
                           {"first_generation_s", first_generation_s},
                           {"steady_commands_per_s", steady.commands_per_s},
                           {"steady_redis_core_fraction", steady.core_fraction},
                           {"steady_redis_connections", steady.connections},
                           {"steady_blocked_clients", steady.blocked},
                           {"agents_only_commands_per_s", agents_only.commands_per_s},
                           {"agents_only_redis_core_fraction", agents_only.core_fraction},
                           {"get_round_trip_redis_us", round_trip_cpu_s * 1e6},
                           {"steady_get_round_trips_equivalent_per_s", steady_trips},
                           {"agents_only_get_round_trips_equivalent_per_s", agents_only_trips},
                           {"lease_expiry_to_next_generation_s", detect_publish_s},
                           {"lease_expiry_to_every_agent_knows_s", every_agent_knows_s},
                           {"lease_expiry_to_every_agent_read_the_record_s", every_agent_read_record_s},
                           {"records_known", !no_records},
                           {"first_record_given", first_record_given},
                           {"change_records_read", change_records_read},
                           {"change_records_derived_from_the_delta", change_records_derived},
                           {"delta_checked", delta_checked},
                           {"generation_record_bytes", record_bytes},
                           {"first_generation_published_to_every_agent_read_its_record_s", first_records_s},
                           {"redis_used_memory_peak_bytes", redis_memory_peak},
                           {"agents_told_by_the_stream", known.by_stream},
                           {"live_agents", agents.live()}};
  if (json) {
    std::cout << result.dump(2) << "\n";
  } else {
    std::cout << "nodes " << s.nodes << " (" << s.nodes * s.slots << " GPUs), lease " << s.lease_ms << " ms, heartbeat "
              << timing.heartbeat.count() << " ms\n"
              << "  all registered after              " << registered_s << " s\n"
              << "  first generation (all) after      " << first_generation_s << " s (settle window 1 s)\n"
              << "  ... every agent read its record   " << first_records_s << " s later (" << record_bytes
              << " bytes; -1: --no-records or --first-record-given); Redis memory peak " << redis_memory_peak / 1e6 << " MB\n"
              << "  steady state                      " << steady.commands_per_s << " commands/s, "
              << steady.core_fraction * 100 << "% of one Redis core, " << steady.connections << " connections, "
              << steady.blocked << " blocked on the stream\n"
              << "  agents alone (leader idle)        " << agents_only.commands_per_s << " commands/s, "
              << agents_only.core_fraction * 100 << "% of one Redis core\n"
              << "  one GET round trip (yardstick)    " << round_trip_cpu_s * 1e6 << " us of Redis CPU: the steady state costs "
              << steady_trips << " of them per second, the agents alone " << agents_only_trips << "\n"
              << "  lease expiry -> next generation   " << detect_publish_s << " s\n"
              << "  lease expiry -> every agent knows " << every_agent_knows_s << " s (" << known.by_stream << " of "
              << agents.live() << " told by the stream)\n"
              << "  ... every agent knew its record   " << every_agent_read_record_s << " s (" << change_records_derived
              << " derived from the delta, " << change_records_read << " read; delta checked: " << delta_checked << ")\n";
  }
  return 0;
}
