#include "mesh/comm/descriptor.h"

#include <cstdio>

#include <xxhash.h>

#include "mesh/comm/communicator.h"
#include "mesh/comm/reductions.h"
#include "ops/dtype.h"

namespace hdp::mesh {

const char* kind_name(std::uint32_t kind) {
  switch (static_cast<Kind>(kind)) {
    case Kind::kAllreduce: return "allreduce";
    case Kind::kReduceScatter: return "reduce_scatter";
    case Kind::kAllgather: return "allgather";
    case Kind::kBroadcast: return "broadcast";
    case Kind::kBarrier: return "barrier";
  }
  return "unknown collective";
}

std::uint64_t hash_counts(const std::vector<std::int64_t>& counts) {
  return XXH3_64bits(counts.data(), counts.size() * sizeof(std::int64_t));
}

std::string describe(const Descriptor& d) {
  if (d.magic != Descriptor::kMagic) return "a message that is not a collective descriptor";
  std::string s = std::string(kind_name(d.kind)) + " #" + std::to_string(d.seq);
  if (d.dtype >= 0) {
    s += " of " + std::to_string(d.elements) + " " + ops::dtype_name(static_cast<ops::DType>(d.dtype));
  }
  if (d.op >= 0) s += std::string(" (") + op_name(static_cast<ReduceOp>(d.op)) + ")";
  if (d.root >= 0) s += " from root " + std::to_string(d.root);
  if (d.kind == static_cast<std::uint32_t>(Kind::kReduceScatter) || d.kind == static_cast<std::uint32_t>(Kind::kAllgather)) {
    char hex[24];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(d.counts_hash));
    s += std::string(", counts hash ") + hex;
  }
  return s;
}

std::optional<std::string> mismatch(int rank, const Descriptor& mine, int peer, const Descriptor& theirs) {
  if (theirs == mine) return std::nullopt;
  return "collectives differ across ranks: rank " + std::to_string(rank) + " started " + describe(mine) + ", rank " +
         std::to_string(peer) + " started " + describe(theirs);
}

}  // namespace hdp::mesh
