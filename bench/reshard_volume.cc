// bench/reshard_volume: what a recovery from memory moves when one node of a large job is lost, from
// hdp's own plans (mesh/step/buddies.h, mesh/step/reshard.h), for the recovery-time model of
// docs/performance.md. No data moves here: for N ranks on N / gpus-per-node nodes, with the node in
// the middle lost between two steps (every survivor's parameter buffer whole, as after a step), it
// builds each survivor's HeldState (its own shard and the copy plan_buddies gives it), runs
// plan_reshard for the N - gpus-per-node survivors, and reports the optimizer bytes each rank
// sends and receives (exp_avg and exp_avg_sq, 4 bytes per element each, as execute_reshard sends
// them), the busiest rank's, that rank's time at the stated link speed, and how long planning
// took on this machine (every rank computes the same plan).
// Usage: reshard_volume [--ranks 1024,12288] [--gpus-per-node 8] [--params 6.74e9] [--link-gbps 400] [--json]
#include <algorithm>
#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "mesh/step/buddies.h"
#include "mesh/step/reshard.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Volume {
  int ranks = 0, survivors = 0;
  double total_bytes = 0, max_sent = 0, max_received = 0, plan_s = 0;
  std::int64_t step = 0;
  bool possible = false;
};

Volume volume(int ranks, int per_node, double params) {
  std::vector<std::string> node_of_rank;
  for (int r = 0; r < ranks; ++r) node_of_rank.push_back("n" + std::to_string(r / per_node));
  const hdp::mesh::BuddyPlan buddies = hdp::mesh::plan_buddies(node_of_rank);
  const int lost_node = ranks / per_node / 2;
  constexpr std::int64_t kStep = 100;
  std::vector<hdp::mesh::HeldState> states;
  for (int r = 0; r < ranks; ++r) {
    if (r / per_node == lost_node) continue;
    hdp::mesh::HeldState s{.layout = 1, .old_world = ranks, .old_rank = r, .completed = kStep, .params_step = kStep};
    s.positions[0] = {.step = kStep, .epoch = 0, .sample = 0};
    s.held.push_back({r, kStep});
    for (int owner : buddies.held[static_cast<std::size_t>(r)]) s.held.push_back({owner, kStep});
    states.push_back(std::move(s));
  }
  Volume v{.ranks = ranks, .survivors = static_cast<int>(states.size())};
  const auto start = Clock::now();
  const hdp::mesh::ReshardPlan plan = hdp::mesh::plan_reshard(states, static_cast<std::int64_t>(params));
  v.plan_s = std::chrono::duration<double>(Clock::now() - start).count();
  v.possible = plan.possible;
  v.step = plan.step;
  std::vector<double> sent(states.size()), received(states.size());
  for (const auto& piece : plan.pieces) {
    if (piece.from == piece.to) continue;
    const double bytes = 2.0 * 4.0 * static_cast<double>(piece.end - piece.begin);
    sent[static_cast<std::size_t>(piece.from)] += bytes;
    received[static_cast<std::size_t>(piece.to)] += bytes;
    v.total_bytes += bytes;
  }
  v.max_sent = *std::max_element(sent.begin(), sent.end());
  v.max_received = *std::max_element(received.begin(), received.end());
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> ranks{1024, 12288};
  int per_node = 8;
  double params = 6.74e9, link_gbps = 400;
  bool json = false;
  CLI::App app{"Bytes a recovery from memory moves when one node is lost (hdp's reshard plan)"};
  app.add_option("--ranks", ranks)->delimiter(',')->check(CLI::Range(4, 1000000));
  app.add_option("--gpus-per-node", per_node)->check(CLI::Range(1, 64));
  app.add_option("--params", params, "the model's parameter count")->check(CLI::Range(1e3, 1e13));
  app.add_option("--link-gbps", link_gbps, "each rank's network bandwidth, Gb/s")->check(CLI::Range(1.0, 1e5));
  app.add_flag("--json", json);
  CLI11_PARSE(app, argc, argv);

  nlohmann::json rows = nlohmann::json::array();
  for (int n : ranks) {
    if (n % per_node != 0 || n / per_node < 3) {
      std::cerr << "reshard_volume: --ranks " << n << " must be a multiple of --gpus-per-node with 3 nodes or more\n";
      return 2;
    }
    const Volume v = volume(n, per_node, params);
    if (!v.possible) {
      std::cerr << "reshard_volume: the plan found no complete state at " << n << " ranks\n";
      return 1;
    }
    const double busiest = std::max(v.max_sent, v.max_received);
    const double seconds = busiest / (link_gbps * 1e9 / 8);
    rows.push_back({{"ranks", n},
                    {"survivors", v.survivors},
                    {"params", params},
                    {"step", v.step},
                    {"total_bytes", v.total_bytes},
                    {"busiest_rank_sent_bytes", v.max_sent},
                    {"busiest_rank_received_bytes", v.max_received},
                    {"busiest_rank_s_at_link", seconds},
                    {"link_gbps", link_gbps},
                    {"plan_s", v.plan_s}});
    if (!json) {
      std::cout << n << " ranks, one node of " << per_node << " lost, " << params / 1e9 << " B parameters: "
                << v.total_bytes / 1e9 << " GB moved in all; the busiest rank sends " << v.max_sent / 1e6
                << " MB and receives " << v.max_received / 1e6 << " MB (" << seconds * 1e3 << " ms at " << link_gbps
                << " Gb/s); planning took " << v.plan_s * 1e3 << " ms\n";
    }
  }
  if (json) std::cout << rows.dump(2) << "\n";
  return 0;
}
