// File: tests/checkpoint/checkpoint_fixture.h
//
// A tiny LLaMA-shaped flat layout with deterministic contents, uneven shard ranges, and helpers
// that save and restore it with ranks as threads. Small on purpose: the whole suite runs in seconds.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <vector>

#include "checkpoint/flat_layout.h"
#include "checkpoint/options.h"
#include "checkpoint/state.h"

namespace hdp::checkpoint::test {

// Two decoder layers of hidden size 16, vocabulary 37, MLP width 43: about 7,000 elements per buffer.
FlatLayout tiny_llama_layout();
nlohmann::json tiny_llama_config();

// The three full flat buffers of a job.
struct FullState {
  std::array<std::vector<float>, kBufferCount> buffers;
  bool operator==(const FullState&) const = default;
};

// Values that differ per buffer, element and `seed`, with distinct bit patterns.
FullState make_state(const FlatLayout& layout, std::uint32_t seed);
FullState zero_state(const FlatLayout& layout);

// Shard ranges over `world` ranks with deliberately unequal sizes (rank r gets a share growing with r),
// cutting tensors at arbitrary points.
std::vector<ShardRange> uneven_ranges(std::int64_t total, int world);

std::vector<std::uint8_t> rng_bytes(int rank, std::int64_t step);
inline DataPosition data_position(std::int64_t step) { return {static_cast<std::uint64_t>(step / 100), static_cast<std::uint64_t>(step * 7)}; }

// Options under `root` with small checksum blocks (64 bytes = 16 floats), so that reads cut blocks.
CheckpointOptions small_options(const std::filesystem::path& root);

// Saves `state` at `step` on `world` thread-ranks with uneven_ranges (Saver); rethrows a rank's failure.
void save_on(int world, const CheckpointOptions& options, const FlatLayout& layout, const FullState& state, std::int64_t step);

// Restores on `world` thread-ranks with uneven_ranges; the assembled buffers and every rank's progress.
struct Restored {
  FullState state;
  std::vector<std::optional<RestoredProgress>> progress;  // by rank
};
Restored restore_on(int world, const CheckpointOptions& options, const FlatLayout& layout);

// Total size of the files directly in `dir` (a checkpoint's step directory).
std::uint64_t bytes_under(const std::filesystem::path& dir);
// The steps of the committed checkpoints under `root`, as list_committed() orders them.
std::vector<std::int64_t> committed_steps(const std::filesystem::path& root);

// The snapshot a rank saves: its slice of `state`.
ShardSnapshot snapshot_of(const FullState& state, ShardRange range, int rank, std::int64_t step);

}  // namespace hdp::checkpoint::test
