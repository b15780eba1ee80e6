// File: checkpoint/shard_io.h
//
// One rank file: writing a rank's shard of the three buffers (one dataset per tensor piece,
// checksummed per block while writing) and reading any element range of a piece back with every
// block it touches verified. Both may block on the disk for as long as the I/O takes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "checkpoint/flat_layout.h"
#include "checkpoint/hdf5_file.h"
#include "checkpoint/hooks.h"
#include "checkpoint/manifest.h"
#include "checkpoint/rank_record.h"
#include "checkpoint/state.h"

namespace hdp::checkpoint {

// Writes <dir>/rank-<r>.h5 for `shard`, makes it durable and returns what rank 0 needs for the
// manifest. Calls fault_hook(kPointShardWriting) once the parameters are written and the moments
// are not. Throws InvalidArgument when the snapshot does not fit the layout, FatalError on I/O.
RankRecord write_rank_file(const std::filesystem::path& dir, int rank, const FlatLayout& layout,
                           const ShardSnapshot& shard, std::int64_t checksum_block_elems, const FaultHook& fault_hook);

// Reads elements [begin, begin + out.size()) of `piece` (piece coordinates) from `file` into
// `out`, verifying the checksum of every block the range touches; blocks cut by the range go
// through `scratch`. Throws FatalError naming the file, `what` (buffer and tensor) and the block.
void read_piece_verified(const Hdf5File& file, const PieceRecord& piece, std::int64_t block_elems,
                         std::int64_t begin, std::span<float> out, const std::string& what,
                         std::vector<float>& scratch);

// The rank's RNG state from its file, checked against the manifest.
std::vector<std::uint8_t> read_rng_verified(const Hdf5File& file, const FileRecord& record);

}  // namespace hdp::checkpoint
