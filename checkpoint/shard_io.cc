#include "checkpoint/shard_io.h"

#include <algorithm>
#include <cstring>

#include "checkpoint/checksum.h"
#include "common/error.h"

namespace hdp::checkpoint {
namespace {

// Elements per read of whole checksum blocks (4 MiB): large enough that HDF5's per-call cost
// vanishes, small enough to stay in the last-level cache until it is hashed.
constexpr std::int64_t kVerifiedReadElems = std::int64_t{1} << 20;

void check_snapshot(const FlatLayout& layout, const ShardSnapshot& shard) {
  if (shard.range.begin < 0 || shard.range.end > layout.total() || shard.range.begin > shard.range.end) {
    throw InvalidArgument("save: shard range [" + std::to_string(shard.range.begin) + ", " + std::to_string(shard.range.end) +
                          ") is not inside the flat buffer of " + std::to_string(layout.total()) + " elements");
  }
  for (std::size_t b = 0; b < kBufferCount; ++b) {
    if (std::ssize(shard.buffers[b]) != shard.range.size()) {
      throw InvalidArgument("save: " + std::string(kBufferNames[b]) + " holds " + std::to_string(shard.buffers[b].size()) +
                            " elements, the shard range " + std::to_string(shard.range.size()));
    }
  }
  if (shard.step < 0) throw InvalidArgument("save: step " + std::to_string(shard.step) + " must be >= 0");
}

}  // namespace

RankRecord write_rank_file(const std::filesystem::path& dir, int rank, const FlatLayout& layout,
                           const ShardSnapshot& shard, std::int64_t checksum_block_elems, const FaultHook& fault_hook) {
  check_snapshot(layout, shard);
  RankRecord record;
  record.file.name = rank_file_name(rank);
  record.file.rank = rank;
  record.file.shard = shard.range;
  record.file.rng_bytes = std::ssize(shard.rng_state);
  record.file.rng_xxh3 = xxh3(std::span<const std::uint8_t>(shard.rng_state));
  record.step = shard.step;
  record.data = shard.data;

  const std::filesystem::path path = dir / record.file.name;
  Hdf5File file = Hdf5File::create(path);
  const std::vector<Slice> slices = layout.slices(shard.range);
  file.reserve(kBufferCount * static_cast<std::uint64_t>(shard.range.size()) * sizeof(float) + shard.rng_state.size(),
               kBufferCount * slices.size() + 1);
  for (std::size_t b = 0; b < kBufferCount; ++b) {
    if (b == 1 && fault_hook) fault_hook(kPointShardWriting, rank);
    for (const Slice& slice : slices) {
      const std::string& tensor = layout.tensors()[slice.tensor].name;
      const auto data = shard.buffers[b].subspan(static_cast<std::size_t>(slice.flat_offset - shard.range.begin),
                                                 static_cast<std::size_t>(slice.length));
      PieceRecord piece{static_cast<std::size_t>(rank), dataset_name(b, tensor), slice.tensor_offset, slice.length,
                        block_checksums(data, checksum_block_elems)};
      file.write_floats(piece.dataset, data);
      file.set_attribute(piece.dataset, "offset", slice.tensor_offset);
      record.pieces.push_back({slice.tensor, b, std::move(piece)});
    }
  }
  file.write_bytes("/state/rng", shard.rng_state);
  file.set_attribute("/state", "step", shard.step);
  file.set_attribute("/state", "rank", rank);
  file.set_attribute("/state", "shard_begin", shard.range.begin);
  file.set_attribute("/state", "shard_end", shard.range.end);
  file.set_attribute("/state", "data_epoch", static_cast<std::int64_t>(shard.data.epoch));
  file.set_attribute("/state", "data_sample", static_cast<std::int64_t>(shard.data.sample));
  file.close_durably();
  record.file.bytes = std::filesystem::file_size(path);
  return record;
}

void read_piece_verified(const Hdf5File& file, const PieceRecord& piece, std::int64_t block_elems,
                         std::int64_t begin, std::span<float> out, const std::string& what,
                         std::vector<float>& scratch) {
  const std::int64_t end = begin + std::ssize(out);
  HDP_CHECK(begin >= 0 && end <= piece.length && block_elems > 0, "piece read outside the piece");
  if (out.empty()) return;
  auto verify = [&](std::int64_t first, std::span<const float> data) {
    const std::int64_t block = first / block_elems;
    if (xxh3(data) != piece.xxh3.at(static_cast<std::size_t>(block))) {
      throw FatalError(file.path().string() + ": " + what + ": checksum mismatch in block " + std::to_string(block) +
                       " (elements [" + std::to_string(piece.offset + first) + ", " +
                       std::to_string(piece.offset + first + std::ssize(data)) + ") of the tensor)");
    }
  };
  // A block the range only partly covers: read all of it, verify, copy out the covered part.
  auto read_partial = [&](std::int64_t first) {
    const std::int64_t last = std::min(first + block_elems, piece.length);
    scratch.resize(static_cast<std::size_t>(last - first));
    file.read_floats(piece.dataset, first, scratch);
    verify(first, scratch);
    const std::int64_t from = std::max(first, begin), to = std::min(last, end);
    std::memcpy(out.data() + (from - begin), scratch.data() + (from - first), static_cast<std::size_t>(to - from) * sizeof(float));
  };
  const auto round_down = [&](std::int64_t i) { return i / block_elems * block_elems; };
  const std::int64_t full_begin = round_down(begin + block_elems - 1);
  const std::int64_t full_end = end == piece.length ? piece.length : round_down(end);
  if (full_begin >= full_end) {
    read_partial(round_down(begin));
    if (round_down(end - 1) != round_down(begin)) read_partial(round_down(end - 1));
    return;
  }
  if (begin < full_begin) read_partial(round_down(begin));
  // Whole blocks go straight into `out`, no extra copy, in reads of a few MiB each verified right
  // after, while the bytes are still in the CPU cache.
  const std::int64_t step = std::max(block_elems, kVerifiedReadElems / block_elems * block_elems);
  for (std::int64_t first = full_begin; first < full_end; first += step) {
    const std::int64_t last = std::min(first + step, full_end);
    const auto direct = out.subspan(static_cast<std::size_t>(first - begin), static_cast<std::size_t>(last - first));
    file.read_floats(piece.dataset, first, direct);
    for (std::int64_t block = first; block < last; block += block_elems) {
      verify(block, direct.subspan(static_cast<std::size_t>(block - first),
                                   static_cast<std::size_t>(std::min(block_elems, last - block))));
    }
  }
  if (full_end < end) read_partial(full_end);
}

std::vector<std::uint8_t> read_rng_verified(const Hdf5File& file, const FileRecord& record) {
  std::vector<std::uint8_t> rng = file.read_bytes("/state/rng");
  if (std::ssize(rng) != record.rng_bytes || xxh3(std::span<const std::uint8_t>(rng)) != record.rng_xxh3) {
    throw FatalError(file.path().string() + ": RNG state (/state/rng) does not match its checksum");
  }
  return rng;
}

}  // namespace hdp::checkpoint
