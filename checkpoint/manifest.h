// File: checkpoint/manifest.h
//
// manifest.json, the index of one checkpoint (docs/checkpoint-format.md): per tensor its global
// shape and, per buffer, the pieces that tile it: file, dataset, offset within the flattened
// tensor, length and xxh3 checksums per block. Plus format version, step, world size, model
// config and data position. Pure data and JSON; reading files lives elsewhere.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/flat_layout.h"
#include "checkpoint/state.h"

namespace hdp::checkpoint {

inline constexpr int kFormatVersion = 1;
inline constexpr std::string_view kFormatName = "hdp-checkpoint";
inline constexpr std::string_view kManifestFile = "manifest.json";

// One rank file of the checkpoint.
struct FileRecord {
  std::string name;          // "rank-00003.h5", relative to the checkpoint directory
  int rank = 0;
  std::uint64_t bytes = 0;   // size after the writer closed it
  ShardRange shard;          // the part of the flat buffer it holds
  std::int64_t rng_bytes = 0;
  std::uint64_t rng_xxh3 = 0;
  bool operator==(const FileRecord&) const = default;
};

// A contiguous part of one tensor in one file.
struct PieceRecord {
  std::size_t file = 0;          // index into Manifest::files (== the writing rank)
  std::string dataset;           // "/params/model.norm.weight"
  std::int64_t offset = 0;       // first element within the flattened tensor
  std::int64_t length = 0;       // elements
  std::vector<std::uint64_t> xxh3;  // one per checksum block of the piece
  bool operator==(const PieceRecord&) const = default;
};

struct TensorRecord {
  std::string name;
  std::vector<std::int64_t> shape;
  std::array<std::vector<PieceRecord>, kBufferCount> pieces;  // by buffer (kBufferNames), in offset order
  bool operator==(const TensorRecord&) const = default;
};

struct Manifest {
  int format_version = kFormatVersion;
  std::int64_t step = 0;
  int world_size = 0;
  nlohmann::json model_config;
  DataPosition data;
  std::string data_fingerprint;  // of the data `data` is a position in; empty: not recorded (older checkpoints)
  std::int64_t checksum_block_bytes = 0;
  std::vector<FileRecord> files;      // by rank
  std::vector<TensorRecord> tensors;  // in flat-buffer order
  bool operator==(const Manifest&) const = default;

  std::int64_t checksum_block_elems() const { return checksum_block_bytes / static_cast<std::int64_t>(sizeof(float)); }
  std::uint64_t total_bytes() const;
  FlatLayout layout() const;
};

// The HDF5 dataset of a tensor piece: "/<buffer>/<tensor name>".
std::string dataset_name(std::size_t buffer, const std::string& tensor);

nlohmann::json to_json(const Manifest& manifest);
// Throws InvalidArgument naming the missing or malformed field.
Manifest manifest_from_json(const nlohmann::json& json);

// Structural faults, one sentence each (empty when sound): files indexed by rank, shards tiling the
// flat buffer, each tensor's pieces tiling it exactly once and matching their file's shard, one
// checksum per block.
std::vector<std::string> structural_faults(const Manifest& manifest);

// Throws InvalidArgument, naming the first difference, unless the checkpoint holds exactly the
// tensors of `layout` (names, order, shapes) for the same model config (its
// max_position_embeddings, the context trained at, aside).
void check_compatible(const Manifest& manifest, const FlatLayout& layout, const nlohmann::json& model_config,
                      const std::filesystem::path& where);

// Reads and parses <dir>/manifest.json; throws FatalError when unreadable, InvalidArgument when malformed.
Manifest read_manifest(const std::filesystem::path& dir);

}  // namespace hdp::checkpoint
