// File: trainer/shard_copies.h
//
// The trainer's side of the redundant optimizer shards (TrainerConfig::redundant_shards,
// mesh/step/replicas.h): at each generation's start every shard is sent whole to its holder on
// another node, so that the copies start equal to the originals whatever happened before (a
// restore, renumbered ranks); every verify_replicas_every steps the copies are compared with
// their originals (a mismatch is logged as an error naming both ranks; training goes on); and when
// nodes leave, whether every leaving rank's shard has a copy that stays (then the others go on
// from memory, without a checkpoint first).
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "elastic/elastic_context.h"
#include "mesh/comm/communicator.h"
#include "mesh/step/replicas.h"
#include "mesh/step/zero.h"

namespace hdp::trainer {

class ShardCopies {
 public:
  // Collective: forgets the last generation's copies, and places this generation's when `enabled`.
  void start_generation(bool enabled, const elastic::Membership& m, mesh::Communicator& comm,
                        mesh::ZeroOptimizer& optimizer, const ops::Tensor& params, std::int64_t step,
                        mesh::Communicator::Duration timeout);
  // Collective: compares every copy with its original; rank 0 logs the outcome.
  void verify(const elastic::Membership& m, mesh::Communicator& comm, const mesh::ZeroOptimizer& optimizer,
              std::int64_t step) const;
  // Whether every shard of a rank on a leaving node has a copy on a node that stays.
  bool cover(const std::set<std::string>& leaving, const std::vector<std::string>& node_of_rank) const;

 private:
  std::optional<mesh::BuddyPlan> plan_;  // this generation's copies, once placed
};

}  // namespace hdp::trainer
