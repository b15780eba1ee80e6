// File: mesh/step/buddies.h
//
// Where each rank's redundant optimizer shard lives (ZeRO-1 with a second copy of every shard,
// mesh/step/zero.h): the holder of owner r's copy is a rank on another node, so that the loss of one
// node never removes both copies of a shard. Chosen from the generation's membership alone, so
// every rank computes the same plan with no message:
//
//   when no node has more than half the ranks (the largest has s): list the ranks grouped by node
//   (nodes in order of their first rank) and give the copy of the rank at position i to the rank
//   at position i + s (cyclically): a permutation, every rank holds exactly one copy, never one of
//   its own node's;
//   otherwise (a permutation across nodes is impossible): for each owner r = 0, 1, ..., W-1 in
//   turn, among the ranks on another node than r's, the one holding the fewest copies so far, ties
//   to the first after r in cyclic rank order (the ranks outside the big node hold several).
//
// One node: no rank has another node to use; redundancy is off.
#pragma once

#include <string>
#include <vector>

namespace hdp::mesh {

struct BuddyPlan {
  std::vector<int> holder;             // by owner rank: the rank holding its copy; -1: none
  std::vector<std::vector<int>> held;  // by rank: the owners whose copies it holds, ascending
  bool complete() const;               // every rank's shard has a copy
};

// `node_of_rank[r]` names rank r's node (ranks of a node need not be contiguous).
BuddyPlan plan_buddies(const std::vector<std::string>& node_of_rank);

}  // namespace hdp::mesh
