// File: checkpoint/options.h
//
// How a job checkpoints: where, for which model, how many to keep, and whom to tell.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>

#include <nlohmann/json.hpp>

#include "checkpoint/hooks.h"

namespace hdp::checkpoint {

struct CheckpointOptions {
  std::filesystem::path root;   // holds step-<N>/ directories (checkpoint/checkpoint_root.h)
  nlohmann::json model_config;  // recorded in the manifest; a restore under another config is refused
  // The data's fingerprint (trainer/data/piece_source.h), recorded in the manifest for the trainer
  // to compare on a restore; empty: none recorded.
  std::string data_fingerprint;
  int keep = 3;                 // committed checkpoints kept (--keep), >= 1
  // Restore: this committed step only, no fallback to older ones (hdp export of one checkpoint);
  // nullopt: the newest valid one.
  std::optional<std::int64_t> only_step;
  // Bytes per checksum block: a restore reading part of a piece reads at most two blocks more
  // than it needs. A multiple of 4 (one fp32), >= 4.
  std::int64_t checksum_block_bytes = std::int64_t{4} << 20;
  Hooks hooks;
  FaultHook fault_hook;  // test-only
};

// Throws InvalidArgument naming the first bad field.
void validate(const CheckpointOptions& options);

}  // namespace hdp::checkpoint
