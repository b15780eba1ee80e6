// File: mesh/comm/descriptor.h
//
// The fixed-size descriptor every collective starts with (kind, dtype, op, root, sequence number,
// element count and a hash of the counts vector), exchanged with both ring neighbours before any
// data (collectives.h, exchange_descriptor): two ranks whose descriptors differ started different
// collectives, and the message that says so names both.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace hdp::mesh {

enum class Kind : std::uint32_t { kAllreduce = 1, kReduceScatter, kAllgather, kBroadcast, kBarrier };

// "allreduce", "reduce_scatter", ...; "unknown collective" for any other value.
const char* kind_name(std::uint32_t kind);

struct Descriptor {
  std::uint64_t magic = kMagic;
  std::uint64_t seq = 0;
  std::uint32_t kind = 0;
  std::int32_t dtype = -1;  // -1: no data (barrier)
  std::int32_t op = -1;     // -1: no reduction
  std::int32_t root = -1;   // broadcast only
  std::int64_t elements = 0;       // numel, or sum(counts)
  std::uint64_t counts_hash = 0;   // reduce_scatter and allgather: xxh3-64 of the counts

  static constexpr std::uint64_t kMagic = 0x6864702d636f6c6cULL;  // "hdp-coll"

  bool operator==(const Descriptor&) const = default;
};
static_assert(std::is_trivially_copyable_v<Descriptor> && sizeof(Descriptor) == 48);

std::uint64_t hash_counts(const std::vector<std::int64_t>& counts);

// "allreduce #3 of 1024 f32 (sum)", "broadcast #4 of 10 i64 from root 2", ...
std::string describe(const Descriptor& d);

// Nothing when `theirs` (what rank `peer` started) equals `mine` (what rank `rank` started);
// otherwise the InvalidArgument message naming both ranks and both descriptors.
std::optional<std::string> mismatch(int rank, const Descriptor& mine, int peer, const Descriptor& theirs);

}  // namespace hdp::mesh
