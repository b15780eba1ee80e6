#include "mesh/step/replicas.h"

#include <xxhash.h>

#include <memory>

#include "mesh/comm/checks.h"
#include "mesh/comm/gather_rows.h"

namespace hdp::mesh {

BuddyPlan place_replicas(ZeroOptimizer& zero, const ops::Tensor& params, const std::vector<std::string>& node_of_rank,
                         std::int64_t step, Communicator& comm, Communicator::Duration timeout) {
  const BuddyPlan plan = plan_buddies(node_of_rank);
  zero.set_replicas(plan);
  // Each owner sends its moments. Its parameters travel only under a bf16 wire, where only the
  // owner's range of its full buffer is the exact master copy (the rest came over the wire in
  // bf16). Under an exact wire (the parameters' own dtype) every rank's full buffer holds every
  // owner's range bit for bit at a generation's start (the last all-gather, or the recovery that
  // left every buffer whole, mesh/step/reshard.h), so a holder takes the range from its own
  // buffer: a third of the placement's bytes stay home.
  const bool exact_wire = zero.wire_dtype() == params.dtype();
  const ops::Tensor flat = params.reshape({params.numel()});
  const std::vector<std::int64_t>& counts = zero.counts();
  const std::vector<std::int64_t> offsets = offsets_of(counts);
  std::vector<std::unique_ptr<Work>> work;
  std::vector<std::pair<int, ops::Tensor>> received;
  for (int owner : zero.replica_owners()) {
    const auto o = static_cast<std::size_t>(owner);
    work.push_back(comm.irecv(zero.replica_exp_avg(owner), owner, kReplicaExpAvgTag));
    work.push_back(comm.irecv(zero.replica_exp_avg_sq(owner), owner, kReplicaExpAvgSqTag));
    if (exact_wire) {
      received.emplace_back(owner, flat.view(offsets[o], {counts[o]}));
      continue;
    }
    received.emplace_back(owner, ops::Tensor::empty({counts[o]}, params.dtype(), params.device()));
    work.push_back(comm.irecv(received.back().second, owner, kReplicaParamsTag));
  }
  if (const int holder = plan.holder[static_cast<std::size_t>(comm.rank())]; holder >= 0) {
    work.push_back(comm.isend(zero.exp_avg(), holder, kReplicaExpAvgTag));
    work.push_back(comm.isend(zero.exp_avg_sq(), holder, kReplicaExpAvgSqTag));
    if (!exact_wire) {
      work.push_back(comm.isend(flat.view(zero.offset(), {zero.count()}), holder, kReplicaParamsTag));
    }
  }
  for (auto& w : work) w->wait(timeout);
  for (const auto& [owner, owner_params] : received) zero.set_replica_state(owner, owner_params, step);
  // The kept triples serve a rollback from the copies; with none (one node) a lost shard is lost.
  zero.set_keep_previous(plan.complete());
  return plan;
}

ReplicaCheck verify_replicas(const ZeroOptimizer& zero, Communicator& comm) {
  const int world = comm.size();
  const auto width = 2 * static_cast<std::size_t>(world);
  // On a device, over a host copy (a check every N steps, not the step's path).
  auto sum = [](const ops::Tensor& t) {
    const ops::Tensor host = t.device() == ops::Device::kCpu ? t : t.to(ops::Device::kCpu);
    return static_cast<std::int64_t>(XXH3_64bits(host.data<float>(), host.bytes()));
  };
  // Per rank a row of 2·world checksums: its own shard at its rank's place, its copies at their
  // owners' places, 0 elsewhere.
  std::vector<std::int64_t> row(width, 0);
  row[2 * static_cast<std::size_t>(comm.rank())] = sum(zero.exp_avg());
  row[2 * static_cast<std::size_t>(comm.rank()) + 1] = sum(zero.exp_avg_sq());
  const std::vector<std::int64_t> owns = allgather_rows(comm, row);
  std::fill(row.begin(), row.end(), 0);
  for (int owner : zero.replica_owners()) {
    row[2 * static_cast<std::size_t>(owner)] = sum(zero.replica_exp_avg(owner));
    row[2 * static_cast<std::size_t>(owner) + 1] = sum(zero.replica_exp_avg_sq(owner));
  }
  const std::vector<std::int64_t> held = allgather_rows(comm, row);
  ReplicaCheck check;
  for (int holder = 0; holder < world; ++holder) {
    for (int owner = 0; owner < world; ++owner) {
      const std::size_t cell = static_cast<std::size_t>(holder) * width + 2 * static_cast<std::size_t>(owner);
      if (owner == holder || (held[cell] == 0 && held[cell + 1] == 0)) continue;
      const std::size_t original = static_cast<std::size_t>(owner) * width + 2 * static_cast<std::size_t>(owner);
      ++check.checked;
      if (held[cell] != owns[original] || held[cell + 1] != owns[original + 1]) check.wrong.emplace_back(owner, holder);
    }
  }
  return check;
}

}  // namespace hdp::mesh
