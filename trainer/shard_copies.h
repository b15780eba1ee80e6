// File: trainer/shard_copies.h
//
// The trainer's side of the redundant optimizer shards (TrainerConfig::redundant_shards,
// mesh/step/replicas.h): at each generation's start every shard is sent whole to its holder on
// another node, so that the copies start equal to the originals whatever happened before (a
// restore, renumbered ranks); every verify_replicas_every steps the copies are compared with
// their originals (a mismatch is logged as an error naming both ranks; training goes on); and when
// nodes leave, whether every leaving rank's shard has a copy that stays (then the others go on
// from memory, without a checkpoint first).
//
// A rank whose copies weigh more than `background_bytes` (sent and received; TrainerConfig::
// background_placement_mb, 64 MB by default) does not wait
// for them at the generation's start: they travel during the generation's first step, and settle()
// (the step calls it before its update, which overwrites the moments being sent) waits for what is
// left. A large model's join or recovery then costs the running ranks its rebuild, not the copies
// too (docs/architecture.md, "A join at the step boundary"). Until settled the copies do not count:
// cover() is false and the copies are not offered to a rebuild, as while a synchronous placement
// ran. Below the limit the copies are placed before the first step, as they always were: they take
// a fraction of it, and the window without copies stays that short.
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
  // Collective: forgets the last generation's copies, and places this generation's when `enabled`
  // (in the background of the first step above `background_bytes`).
  void start_generation(bool enabled, std::int64_t background_bytes, const elastic::Membership& m,
                        mesh::Communicator& comm, mesh::ZeroOptimizer& optimizer, const ops::Tensor& params,
                        std::int64_t step, mesh::Communicator::Duration timeout);
  // Waits for the copies still on their way (a no-op when none are): before any update of the
  // optimizer. Throws what the communicator throws.
  void settle(mesh::Communicator::Duration timeout);
  // Collective: compares every copy with its original (settling them first); rank 0 logs the outcome.
  void verify(const elastic::Membership& m, mesh::Communicator& comm, const mesh::ZeroOptimizer& optimizer,
              std::int64_t step, mesh::Communicator::Duration timeout);
  // Whether every shard of a rank on a leaving node has a copy on a node that stays (placed: settled).
  bool cover(const std::set<std::string>& leaving, const std::vector<std::string>& node_of_rank) const;

 private:
  std::optional<mesh::BuddyPlan> plan_;  // this generation's copies, once placed
  mesh::ReplicaPlacement placement_;     // on their way
  std::int64_t generation_ = 0;
  bool log_ = false;                     // rank 0 logs the placement
};

}  // namespace hdp::trainer
