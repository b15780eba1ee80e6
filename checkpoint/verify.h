// File: checkpoint/verify.h
//
// Full verification of one checkpoint directory (`hdp ckpt verify`): the manifest parses and is
// structurally sound, every file exists with its recorded size and opens, and every block of every
// piece and every RNG state matches its checksum. Reads everything once; blocks for the reads.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/manifest.h"

namespace hdp::checkpoint {

struct Fault {
  std::string file;     // relative to the checkpoint directory; empty for manifest faults
  std::string tensor;   // "exp_avg model.norm.weight", or the tensors a file-level fault touches
  std::string message;
};

struct VerifyReport {
  std::optional<Manifest> manifest;  // absent when it could not be read
  std::vector<Fault> faults;
  std::uint64_t bytes_checked = 0;   // tensor and RNG bytes whose checksums matched
  bool ok() const { return manifest.has_value() && faults.empty(); }
};

VerifyReport verify_checkpoint(const std::filesystem::path& dir);

}  // namespace hdp::checkpoint
