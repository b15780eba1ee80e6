// `hdp status --job ID [--json] [--watch]`: the job's generation, members, step, ETTR
// (elastic/goodput.h), last checkpoint, the store's primary as the agents recorded it, the last
// recoveries and recent events, read from Redis and validated (elastic/job_state.h).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/job_json.h"
#include "cli/job_options.h"
#include "common/error.h"
#include "common/text.h"
#include "elastic/job_state.h"

namespace hdp::cli {
namespace {

struct StatusFlags {
  JobOptions job;
  bool json = false;
  bool watch = false;
  int events = 10;
  int samples = 0;
  int interval_ms = 1000;
};

std::string field_or_dash(const std::map<std::string, std::string>& state, const char* name) {
  auto it = state.find(name);
  return it == state.end() ? "-" : it->second;
}

std::string field_or_empty(const std::map<std::string, std::string>& state, const char* name) {
  const auto it = state.find(name);
  return it == state.end() ? std::string() : it->second;
}

// "n1,n2" as its node ids (an empty list: none).
std::vector<std::string> node_list(const std::string& list) {
  std::vector<std::string> nodes;
  std::istringstream in(list);
  for (std::string node; std::getline(in, node, ',');) {
    if (!node.empty()) nodes.push_back(node);
  }
  return nodes;
}

std::string format_time(const std::string& ms_text) {
  std::time_t seconds = static_cast<std::time_t>(std::stoll(ms_text) / 1000);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  std::ostringstream out;
  out << std::put_time(&tm, "%H:%M:%S");
  return out.str();
}

// "alive 0.4s" (the time since the agent last renewed it, when the lease records its TTL), "expired".
std::string lease_text(const elastic::JobSnapshot& s, const std::string& node, bool live) {
  if (!live) return "expired";
  auto age = s.lease_ages.find(node);
  if (age == s.lease_ages.end()) return "alive";
  char text[32];
  std::snprintf(text, sizeof text, "alive %.1fs", static_cast<double>(age->second.count()) / 1000.0);
  return text;
}

// The events read to find the last recoveries (more than the events shown).
constexpr std::size_t kRecoveryEventsScanned = 200;

// "  12:03:04  memory, 2.5 s, 0 step(s) lost (generation 3, at step 41)"
void recoveries_text(std::ostream& out, const std::vector<elastic::RecoveryRecord>& recoveries) {
  if (recoveries.empty()) return;
  out << "\nrecent recoveries (how the state came back, from the interruption to the next step, steps lost):\n";
  for (const auto& r : recoveries) {
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%.1f s", r.seconds);
    out << "  " << (r.time_ms > 0 ? format_time(std::to_string(r.time_ms)) : std::string("--:--:--")) << "  " << r.kind
        << ", " << seconds << ", " << r.lost_steps << " step(s) lost (generation " << r.generation << ", at step "
        << r.step << ")\n";
  }
}

std::string to_table(const std::string& job, const elastic::JobSnapshot& s,
                     const std::vector<elastic::RecoveryRecord>& recoveries) {
  std::ostringstream out;
  out << "job " << job << ": " << field_or_dash(s.state, "status") << ", generation " << s.generation << ", world size "
      << (s.members ? s.members->world_size() : 0) << ", step " << field_or_dash(s.state, "step") << "\n";
  if (s.state.count("loss")) {
    out << "training: loss " << field_or_dash(s.state, "loss") << ", " << field_or_dash(s.state, "tokens_per_s")
        << " tokens/s, step " << field_or_dash(s.state, "step_ms") << " ms, lr " << field_or_dash(s.state, "lr")
        << ", " << field_or_dash(s.state, "tokens") << " tokens trained\n";
  }
  if (const auto goodput = elastic::goodput_figures(s.state, elastic::now_ms())) {
    out << elastic::goodput_text(*goodput) << "\n";
  }
  if (s.state.count("eval_loss")) {
    out << "validation: eval_loss " << field_or_dash(s.state, "eval_loss") << " at step "
        << field_or_dash(s.state, "eval_step") << "\n";
  }
  if (s.state.count("settings_in_force")) out << "settings: " << s.state.at("settings_in_force") << "\n";
  out << "leader: " << s.leader.value_or("-") << "    last checkpoint: step " << field_or_dash(s.state, "last_ckpt_step")
      << " at " << field_or_dash(s.state, "last_ckpt_path") << "\n";
  // The Redis node the agents last saw as the primary, and the failovers they recorded.
  if (s.store_primary) out << "store: primary " << *s.store_primary << ", " << s.store_failovers << " failover(s)\n";
  out << "\n";
  // Speeds are per rank of the generation rank 0 last reported for (state `generation`).
  std::vector<double> speeds;
  if (auto it = s.state.find("speeds"); it != s.state.end() && s.members &&
                                        field_or_dash(s.state, "generation") == std::to_string(s.generation)) {
    speeds = elastic::parse_number_list("speeds", it->second);
  }
  out << std::left << std::setw(20) << "NODE" << std::setw(18) << "INCARNATION" << std::setw(16) << "HOST"
      << std::setw(10) << "RANKS" << std::setw(14) << "LEASE" << "SPEEDS\n";
  if (s.members) {
    for (const auto& m : s.members->members) {
      auto lease = s.leases.find(m.node);
      const bool live = lease != s.leases.end() && lease->second.incarnation == m.incarnation;
      const std::string ranks = m.slots.empty() ? "-" : std::to_string(m.first_rank) + "-" +
                                                            std::to_string(m.first_rank + m.slots.size() - 1);
      std::string speed_text;
      for (std::size_t i = 0; i < m.slots.size(); ++i) {
        const std::size_t rank = static_cast<std::size_t>(m.first_rank) + i;
        char one[32];
        std::snprintf(one, sizeof one, "%.2f", rank < speeds.size() ? speeds[rank] : 0.0);
        speed_text += (speed_text.empty() ? "" : " ") + (rank < speeds.size() ? std::string(one) : std::string("-"));
      }
      out << std::setw(20) << m.node << std::setw(18) << m.incarnation << std::setw(16) << m.host << std::setw(10)
          << ranks << std::setw(14) << lease_text(s, m.node, live) << speed_text << "\n";
    }
  }
  const std::int64_t now = elastic::now_ms();
  bool header = false;
  for (const auto& [key, e] : s.evictions) {
    if (!header) out << "\nevicted (node/slot, reason, times, cool-down):\n";
    header = true;
    char speed[32];
    std::snprintf(speed, sizeof speed, " at speed %.2f", e.speed);
    out << "  " << key << "  " << e.reason << (e.reason == "slow" ? speed : "") << ", " << e.count << " time(s), "
        << (e.until_ms > now ? std::to_string((e.until_ms - now + 999) / 1000) + " s left"
                             : std::string(e.readmitted ? "readmitted" : "cool-down over"))
        << "\n";
  }
  // `standby` lists the nodes registered but not members; `preparing` those of them whose workers
  // are still setting up: they are not ready to take a place yet (docs/redis-schema.md).
  const std::vector<std::string> standby = node_list(field_or_empty(s.state, "standby"));
  const std::vector<std::string> preparing = node_list(field_or_empty(s.state, "preparing"));
  std::vector<std::string> ready;
  std::copy_if(standby.begin(), standby.end(), std::back_inserter(ready),
               [&](const std::string& node) { return std::find(preparing.begin(), preparing.end(), node) == preparing.end(); });
  if (!preparing.empty()) {
    out << "\nsetting up (registered; they join, or stand by at MAX, once their workers are set up): "
        << join(preparing) << "\n";
  }
  if (!ready.empty()) {
    out << "\nstandby (registered, not members: they take a lost member's place): " << join(ready) << "\n";
  }
  if (!s.cordons.empty()) {
    out << "\ncordoned (not admitted until `hdp uncordon`):\n";
    for (const auto& [node, c] : s.cordons) out << "  " << node << "  by " << c.by << " at " << format_time(std::to_string(c.at_ms)) << "\n";
  }
  if (!s.requests.empty()) {
    out << "\npending requests:\n";
    auto line = [&](const std::string& what, const elastic::Request& r) {
      out << "  " << what << "  by " << r.by << " at " << format_time(std::to_string(r.at_ms)) << "  (" << r.id << ")\n";
    };
    if (s.requests.stop) line("stop", *s.requests.stop);
    if (s.requests.checkpoint) line("checkpoint", *s.requests.checkpoint);
    for (const auto& [node, d] : s.requests.drains) line("drain " + node + "/" + d.incarnation, d);
  }
  recoveries_text(out, recoveries);
  out << "\nrecent events:\n";
  for (const auto& e : s.events) {
    std::string line;
    std::string time = "--:--:--";
    for (const auto& [k, v] : e.fields) {
      if (k == "time_ms") {
        try {
          time = format_time(v);
        } catch (const std::exception&) {
          // A malformed timestamp in an event is shown raw; the event itself is still worth seeing.
          time = v.substr(0, 12);
        }
      } else {
        line += (line.empty() ? "" : " ") + k + "=" + v;
      }
    }
    out << "  " << time << "  " << line << "\n";
  }
  return out.str();
}

}  // namespace

void add_status_command(CLI::App& app) {
  auto flags = std::make_shared<StatusFlags>();
  CLI::App* command = app.add_subcommand("status", "Show a job's generation, members, step, checkpoint and events");
  flags->job.add_to(*command);
  command->add_flag("--json", flags->json, "Print the same facts as JSON");
  command->add_flag("--watch", flags->watch, "Refresh in place until interrupted");
  command->add_option("--events", flags->events, "Recent events to show")->check(CLI::Range(0, 1000))->capture_default_str();
  command->add_option("--samples", flags->samples, "With --json: the newest training-curve samples to include")
      ->check(CLI::Range(0, static_cast<int>(elastic::kSamplesKept)))
      ->capture_default_str();
  command->add_option("--interval-ms", flags->interval_ms, "Refresh interval of --watch")
      ->check(CLI::Range(100, 3600000))
      ->capture_default_str();
  command->callback([flags] {
    const std::string job = flags->job.job_id();
    auto store = flags->job.connect_job();
    elastic::JobState state(store);
    if (!state.exists()) {
      throw InvalidArgument("no job '" + job + "' in redis at " + elastic::parse_redis_url(flags->job.redis.url).display());
    }
    do {
      const auto shown = static_cast<std::size_t>(flags->events);
      auto snapshot = state.snapshot(std::max(shown, kRecoveryEventsScanned),
                                     flags->json ? static_cast<std::size_t>(flags->samples) : 0);
      const auto recoveries = elastic::recent_recoveries(snapshot.events, kRecoveriesShown);
      if (snapshot.events.size() > shown) {
        snapshot.events.erase(snapshot.events.begin(), snapshot.events.end() - static_cast<std::ptrdiff_t>(shown));
      }
      if (flags->watch) std::cout << "\033[H\033[2J";  // home + clear: redraw in place
      if (flags->json) {
        std::cout << job_json(job, snapshot, &recoveries).dump(flags->watch ? -1 : 2) << std::endl;
      } else {
        std::cout << to_table(job, snapshot, recoveries) << std::flush;
      }
      if (flags->watch) std::this_thread::sleep_for(std::chrono::milliseconds(flags->interval_ms));
    } while (flags->watch);
  });
}

}  // namespace hdp::cli
