#include "mesh/step/buddies.h"

#include <algorithm>

namespace hdp::mesh {

bool BuddyPlan::complete() const {
  return !holder.empty() && std::all_of(holder.begin(), holder.end(), [](int h) { return h >= 0; });
}

BuddyPlan plan_buddies(const std::vector<std::string>& node_of_rank) {
  const int world = static_cast<int>(node_of_rank.size());
  BuddyPlan plan;
  plan.holder.assign(static_cast<std::size_t>(world), -1);
  plan.held.assign(static_cast<std::size_t>(world), {});
  // The ranks grouped by node (nodes in order of their first rank, ranks ascending).
  std::vector<std::string> nodes;
  for (const auto& node : node_of_rank) {
    if (std::find(nodes.begin(), nodes.end(), node) == nodes.end()) nodes.push_back(node);
  }
  std::vector<int> order;
  std::size_t largest = 0;
  for (const auto& node : nodes) {
    const std::size_t before = order.size();
    for (int r = 0; r < world; ++r) {
      if (node_of_rank[static_cast<std::size_t>(r)] == node) order.push_back(r);
    }
    largest = std::max(largest, order.size() - before);
  }
  if (nodes.size() >= 2 && 2 * largest <= static_cast<std::size_t>(world)) {
    // A shift by the largest node's size along that order never lands on the same node: a node's
    // ranks are contiguous in it and no larger than the shift, nor than the way back (world minus
    // the shift).
    for (std::size_t i = 0; i < order.size(); ++i) {
      const int owner = order[i], holder = order[(i + largest) % order.size()];
      plan.holder[static_cast<std::size_t>(owner)] = holder;
      plan.held[static_cast<std::size_t>(holder)].push_back(owner);
    }
    for (auto& owners : plan.held) std::sort(owners.begin(), owners.end());
    return plan;
  }
  for (int owner = 0; owner < world; ++owner) {
    int best = -1;
    for (int step = 1; step < world; ++step) {
      const int candidate = (owner + step) % world;
      if (node_of_rank[static_cast<std::size_t>(candidate)] == node_of_rank[static_cast<std::size_t>(owner)]) continue;
      if (best < 0 || plan.held[static_cast<std::size_t>(candidate)].size() < plan.held[static_cast<std::size_t>(best)].size()) {
        best = candidate;
      }
    }
    if (best < 0) continue;
    plan.holder[static_cast<std::size_t>(owner)] = best;
    plan.held[static_cast<std::size_t>(best)].push_back(owner);
  }
  for (auto& owners : plan.held) std::sort(owners.begin(), owners.end());
  return plan;
}

}  // namespace hdp::mesh
