#include "trainer/shard_copies.h"

#include "common/log.h"
#include "trainer/step_boundary.h"

namespace hdp::trainer {

void ShardCopies::start_generation(bool enabled, const elastic::Membership& m, mesh::Communicator& comm,
                                   mesh::ZeroOptimizer& optimizer, const ops::Tensor& params, std::int64_t step,
                                   mesh::Communicator::Duration timeout) {
  plan_.reset();
  if (!enabled) return;
  plan_ = mesh::place_replicas(optimizer, params, node_of_rank(m), step, comm, timeout);
  if (m.rank == 0) {
    log()->info("generation {}: every optimizer shard copied to a rank of another node{}", m.generation,
                plan_->complete() ? std::string() : std::string(" (none: the job runs on one node)"));
  }
}

void ShardCopies::verify(const elastic::Membership& m, mesh::Communicator& comm, const mesh::ZeroOptimizer& optimizer,
                         std::int64_t step) const {
  const mesh::ReplicaCheck check = mesh::verify_replicas(optimizer, comm);
  if (m.rank != 0) return;
  for (const auto& [owner, holder] : check.wrong) {
    log()->error("step {}: the copy of rank {}'s optimizer shard held by rank {} differs from the original", step,
                 owner, holder);
  }
  if (check.wrong.empty()) {
    log()->info("step {}: {} optimizer shard copies verified equal to their originals", step, check.checked);
  }
}

bool ShardCopies::cover(const std::set<std::string>& leaving, const std::vector<std::string>& node_of_rank) const {
  bool covered = plan_ && plan_->complete();
  for (std::size_t r = 0; covered && r < node_of_rank.size(); ++r) {
    if (!leaving.contains(node_of_rank[r])) continue;
    const int holder = plan_->holder[r];
    covered = holder >= 0 && !leaving.contains(node_of_rank[static_cast<std::size_t>(holder)]);
  }
  return covered;
}

}  // namespace hdp::trainer
