// File: checkpoint/restorer.h
//
// Restore with resharding: a job on M ranks reads a checkpoint written by N ranks, for any N, M.
// Each rank intersects its new shard range with the saved pieces and reads exactly those element
// ranges (rounded out to checksum blocks), verifying every block it reads.
//
// Fallback: candidates are the committed checkpoints, newest first. A missing or wrongly sized
// file, an unreadable manifest or a checksum mismatch on ANY rank (agreed through
// Group::all_true) skips that checkpoint: every rank calls the error hook (the rank that saw the
// fault names the file and tensor, and is the `primary` reporter; rank 0 for a fault every rank
// sees alike, such as a bad manifest or a missing file) and tries the next older one. A checkpoint
// written for another model config or tensor list is refused (InvalidArgument), not skipped.
#pragma once

#include <filesystem>
#include <optional>

#include "checkpoint/flat_layout.h"
#include "checkpoint/group.h"
#include "checkpoint/options.h"
#include "checkpoint/state.h"

namespace hdp::checkpoint {

// Collective. Fills `target` from the newest valid committed checkpoint under options.root and
// returns its progress; nullopt when there is no committed checkpoint at all. Throws
// InvalidArgument on a config mismatch or a target that does not fit the layout, FatalError when
// every committed checkpoint is faulty. Blocks for the reads.
std::optional<RestoredProgress> restore_latest(const CheckpointOptions& options, const FlatLayout& layout,
                                               Group& group, const ShardTarget& target);

}  // namespace hdp::checkpoint
