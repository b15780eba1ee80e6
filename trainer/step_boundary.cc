#include "trainer/step_boundary.h"

#include <span>

#include "common/error.h"
#include "mesh/comm/gather_rows.h"
#include "trainer/trainer.h"

namespace hdp::trainer {
namespace {

// The fields of a row, in order; the live settings follow, a field each (elastic/live_settings.h).
enum Field : std::size_t { kStop, kLeave, kChanged, kComputeUs, kDigest, kCheckpoint, kDrainMember, kStandby, kLive };

std::size_t row_width() { return kLive + elastic::live_settings().size(); }

std::vector<std::int64_t> encode(const BoundaryRow& r) {
  std::vector<std::int64_t> row(kLive);
  row[kStop] = r.stop ? 1 : 0;
  row[kLeave] = r.leave ? 1 : 0;
  row[kChanged] = r.changed ? 1 : 0;
  row[kComputeUs] = r.compute_us;
  row[kDigest] = static_cast<std::int64_t>(r.digest);
  row[kCheckpoint] = r.asked.checkpoint ? 1 : 0;
  row[kDrainMember] = r.asked.drain_member + 1;
  row[kStandby] = r.asked.standby;
  const std::vector<std::int64_t> live = elastic::to_row(r.asked.live);
  row.insert(row.end(), live.begin(), live.end());
  return row;
}

}  // namespace

BoundaryRow row_of(const StopRequest& signals, bool changed, std::int64_t compute_us, std::uint64_t digest,
                   const Asked& asked) {
  const bool stop = signals.job.load() || asked.stop;
  return {.stop = stop,
          .leave = signals.requested.load() && !stop,
          .changed = changed,
          .compute_us = compute_us,
          .digest = digest,
          .asked = asked};
}

Boundary agree(mesh::Communicator& comm, const BoundaryRow& mine, const elastic::LiveValues& flags) {
  const std::vector<std::int64_t> rows = mesh::allgather_rows<std::int64_t>(comm, encode(mine));
  const std::size_t width = row_width();
  Boundary b;
  for (std::size_t r = 0; r < rows.size() / width; ++r) {
    const std::span<const std::int64_t> row(rows.data() + width * r, width);
    b.stop = b.stop || row[kStop] > 0;
    b.leaving.push_back(row[kLeave] > 0);
    b.changed = b.changed || row[kChanged] > 0;
    b.compute_us.push_back(row[kComputeUs]);
    b.digests.push_back(row[kDigest]);
    if (r == 0) {
      b.checkpoint = row[kCheckpoint] > 0;
      b.drained_member = static_cast<int>(row[kDrainMember]) - 1;
      b.standby = static_cast<int>(row[kStandby]);
      b.live = elastic::from_row(flags, row.subspan(kLive));
    }
  }
  return b;
}

Leave leaving_nodes(const Boundary& b, const std::vector<std::string>& node_of_rank, const elastic::Generation& record) {
  Leave leave;
  if (b.drained_member >= 0 && static_cast<std::size_t>(b.drained_member) < record.members.size()) {
    leave.nodes.insert(record.members[static_cast<std::size_t>(b.drained_member)].node);
  }
  std::set<std::string> all;
  for (std::size_t r = 0; r < node_of_rank.size(); ++r) {
    all.insert(node_of_rank[r]);
    if (b.leaving[r]) leave.nodes.insert(node_of_rank[r]);
  }
  leave.staying = static_cast<int>(all.size() - leave.nodes.size());
  return leave;
}

bool leaves_below_min(const Boundary& b, const Leave& leave, int min_nodes) {
  return !b.stop && !leave.nodes.empty() && leave.staying + b.standby < min_nodes;
}

void check_same_plans(const Boundary& b, std::int64_t step) {
  for (std::size_t r = 1; r < b.digests.size(); ++r) {
    if (b.digests[r] != b.digests[0]) {
      throw InvariantViolation("the ranks planned step " + std::to_string(step) + " differently: rank " +
                               std::to_string(r) + "'s plan digest " + std::to_string(b.digests[r]) +
                               ", rank 0's " + std::to_string(b.digests[0]));
    }
  }
}

std::vector<std::string> node_of_rank(const elastic::Membership& m) {
  std::vector<std::string> nodes(static_cast<std::size_t>(m.world_size));
  for (const auto& member : m.record.members) {
    for (std::size_t i = 0; i < member.slots.size(); ++i) nodes[static_cast<std::size_t>(member.first_rank) + i] = member.node;
  }
  return nodes;
}

}  // namespace hdp::trainer
