// File: checkpoint/rank_record.h
//
// What one rank wrote during a save (rank-<r>.json beside its HDF5 file in the .tmp directory):
// its file, shard, step, data position and per-piece checksums. Rank 0 merges the records of all
// ranks into the manifest; a missing record means that rank's file is not durable.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/manifest.h"

namespace hdp::checkpoint {

struct RankRecord {
  FileRecord file;
  std::int64_t step = 0;
  DataPosition data;
  struct Piece {
    std::size_t tensor = 0;  // index in the layout
    std::size_t buffer = 0;  // index in kBufferNames
    PieceRecord piece;       // piece.file == file.rank
  };
  std::vector<Piece> pieces;
};

// "rank-00003.h5" and "rank-00003.json".
std::string rank_file_name(int rank);
std::string rank_record_name(int rank);

nlohmann::json to_json(const RankRecord& record);
RankRecord rank_record_from_json(const nlohmann::json& json);

// Merges the records of ranks 0..n-1 (records[r] from rank r) into a manifest and checks it;
// throws InvalidArgument naming the rank whose step, data position or shard disagrees.
Manifest assemble_manifest(const FlatLayout& layout, const nlohmann::json& model_config,
                           std::int64_t checksum_block_bytes, const std::vector<RankRecord>& records);

}  // namespace hdp::checkpoint
