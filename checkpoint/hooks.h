// File: checkpoint/hooks.h
//
// Callbacks through which a checkpoint reports to the job state (Redis: last_ckpt_step,
// last_ckpt_path, events), which lives in a higher layer. They run on the thread that saves or
// restores (the background writer for async saves) and must not throw.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>

namespace hdp::checkpoint {

struct CommitInfo {
  std::int64_t step = 0;
  std::filesystem::path path;  // the committed directory
  std::uint64_t bytes = 0;     // all files of the checkpoint
  double seconds = 0;          // from the start of the save (after staging) to the commit
};

enum class Operation { kSave, kRestore };

struct ErrorInfo {
  std::int64_t step = 0;       // the step being saved, or the step of the checkpoint that failed to restore
  std::filesystem::path path;  // the directory concerned
  std::string message;         // names the file (and tensor) when one is at fault
  Operation operation = Operation::kSave;  // a failed save, or a checkpoint a restore skipped
  // True on the rank that should report the fault job-wide: the rank that saw it, or rank 0 for a
  // fault every rank sees alike (an unreadable manifest, a missing file, a step already
  // committed). False on ranks that only learned that another rank found a fault. Lets the job
  // state hold one entry per fault rather than one per rank.
  bool primary = true;
};

struct Hooks {
  std::function<void(const CommitInfo&)> on_commit;  // rank 0, after the rename and `latest` are durable
  // A failed save: the rank(s) that saw the fault. A skipped checkpoint on restore: every rank
  // (all of them fall back together), with `primary` marking the one(s) to report it.
  std::function<void(const ErrorInfo&)> on_error;
};

// Test-only: called by a save on each rank that reaches a named point (below); a test pauses or
// kills the process there, or throws to make the save fail. Empty in production.
using FaultHook = std::function<void(std::string_view point, int rank)>;

// The named points, in the order a save passes them.
inline constexpr std::string_view kPointShardWriting = "shard-writing";    // a rank file half written
inline constexpr std::string_view kPointBeforeManifest = "before-manifest";  // all shards durable (rank 0)
inline constexpr std::string_view kPointBeforeRename = "before-rename";      // manifest durable (rank 0)

}  // namespace hdp::checkpoint
