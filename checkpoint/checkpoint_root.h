// File: checkpoint/checkpoint_root.h
//
// The directory that holds a job's checkpoints (docs/checkpoint-format.md):
//   <root>/step-<NNNNNNNN>/        committed (renamed into place after everything in it was durable)
//   <root>/step-<NNNNNNNN>.tmp/    being written, or left by a crash: never read, removed by the next save
//   <root>/step-<NNNNNNNN>.deleting/  retention in progress: never read, removed by the next save
//   <root>/latest                  the name of the newest committed checkpoint (for people and tools)
// Calls may block on the filesystem.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace hdp::checkpoint {

inline constexpr const char* kLatestFile = "latest";

struct CommittedCheckpoint {
  std::int64_t step = 0;
  std::filesystem::path path;
};

// "step-00000042" (at least eight digits).
std::string step_dir_name(std::int64_t step);
// The step of a committed directory name ("step-" and digits only), else nullopt.
std::optional<std::int64_t> parse_step_dir(const std::string& name);

// Committed checkpoints (directories with a committed name), oldest first; empty when `root` does not exist.
std::vector<CommittedCheckpoint> list_committed(const std::filesystem::path& root);
// Directories a crash or a retention pass left behind (.tmp, .deleting).
std::vector<std::filesystem::path> list_uncommitted(const std::filesystem::path& root);
void remove_uncommitted(const std::filesystem::path& root);

// Replaces <root>/latest atomically with the name of `dir`.
void write_latest(const std::filesystem::path& root, const std::filesystem::path& dir);
std::optional<std::string> read_latest(const std::filesystem::path& root);

// Keeps the newest `keep` committed checkpoints and deletes the others: each is first renamed to
// .deleting (so a crash never leaves a half-deleted directory under a committed name), then removed.
// Returns the deleted directories.
std::vector<std::filesystem::path> retain_newest(const std::filesystem::path& root, int keep);

}  // namespace hdp::checkpoint
