// File: checkpoint/saver.h
//
// The synchronous save of one rank and the commit protocol (docs/checkpoint-format.md):
//   1. rank 0 removes leftovers (.tmp, .deleting) and creates <root>/step-<N>.tmp/;   all_true
//   2. every rank writes rank-<r>.h5, fsyncs it, then writes rank-<r>.json (no fsync);  all_true
//   3. rank 0 merges the records into manifest.json, fsyncs it, removes the records, fsyncs the
//      directory, renames step-<N>.tmp to step-<N>, fsyncs <root>, replaces `latest`, deletes
//      checkpoints beyond `keep`, and calls the commit hook.
// A failure anywhere leaves the previous committed checkpoint untouched; the rank that saw it calls
// the error hook and throws. If only rank 0's commit fails, the other ranks have already returned.
#pragma once

#include <exception>
#include <string>

#include "checkpoint/flat_layout.h"
#include "checkpoint/group.h"
#include "checkpoint/options.h"
#include "checkpoint/state.h"

namespace hdp::checkpoint {

class Saver {
 public:
  // `group` must outlive the saver. Throws InvalidArgument on bad options.
  Saver(CheckpointOptions options, FlatLayout layout, Group& group);

  // Collective: every rank calls it with its own shard and the same step. Blocks for the whole
  // write (and, on rank 0, the commit). Throws InvalidArgument when the shard does not fit the
  // layout or step-<N> is already committed, FatalError on I/O faults.
  void save(const ShardSnapshot& shard);

  const FlatLayout& layout() const { return layout_; }
  const CheckpointOptions& options() const { return options_; }

 private:
  void commit(const std::filesystem::path& tmp, const std::filesystem::path& final_dir, double started_seconds);
  // Throws: `error` after reporting it to the log and the error hook when this rank saw it,
  // else FatalError saying that `elsewhere` went wrong on another rank. `every_rank` says that
  // every rank saw the same fault (rank 0 is then the primary reporter).
  [[noreturn]] void fail(std::int64_t step, const std::filesystem::path& path, const std::exception_ptr& error,
                         const std::string& elsewhere, bool every_rank = false) const;

  CheckpointOptions options_;
  FlatLayout layout_;
  Group& group_;
};

}  // namespace hdp::checkpoint
