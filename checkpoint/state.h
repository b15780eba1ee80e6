// File: checkpoint/state.h
//
// What one rank hands to a save and gets back from a restore: its shard of the three flat fp32
// buffers (parameters and both AdamW moments share one layout and one shard range), the step, the
// rank's RNG state and the data-loader position. Independent of ops/: plain spans over host memory.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string_view>
#include <vector>

#include "checkpoint/flat_layout.h"

namespace hdp::checkpoint {

// The three flat buffers, in this order everywhere (HDF5 group names, manifest keys).
inline constexpr std::size_t kBufferCount = 3;
inline constexpr std::array<std::string_view, kBufferCount> kBufferNames = {"params", "exp_avg", "exp_avg_sq"};

// Where the data loader stands; job-global (every rank reports the same value).
struct DataPosition {
  std::uint64_t epoch = 0;
  std::uint64_t sample = 0;  // samples of this epoch already consumed
  bool operator==(const DataPosition&) const = default;
};

// One rank's input to a save. Each span holds range.size() elements: the rank's part of the flat buffer.
struct ShardSnapshot {
  ShardRange range;
  std::array<std::span<const float>, kBufferCount> buffers;
  std::int64_t step = 0;
  std::vector<std::uint8_t> rng_state;  // opaque bytes, per rank
  DataPosition data;
};

// One rank's destination for a restore: range.size() elements per span, filled in place.
struct ShardTarget {
  ShardRange range;
  std::array<std::span<float>, kBufferCount> buffers;
};

// What a restore found besides the buffers.
struct RestoredProgress {
  std::filesystem::path path;  // the committed checkpoint directory it read
  std::int64_t step = 0;
  DataPosition data;
  std::string data_fingerprint;  // as the manifest recorded it; empty: none
  // The RNG state of every rank of the saving job, by its old rank: a job on a different number
  // of ranks decides itself how to map them (e.g. rank r takes rng_states[r % old world size]).
  std::vector<std::vector<std::uint8_t>> rng_states;
};

}  // namespace hdp::checkpoint
