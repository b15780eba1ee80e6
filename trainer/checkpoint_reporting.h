// File: trainer/checkpoint_reporting.h
//
// Records what a checkpoint reports (checkpoint/hooks.h) in the job state (docs/redis-schema.md).
// It lives here because it needs both checkpoint/ and elastic/, which do not know each other.
//
//  - A commit sets `last_ckpt_step` and `last_ckpt_path` in the `state` hash and appends a
//    `checkpoint` event, in one transaction fenced by the worker's generation: a worker whose
//    generation was superseded (it was partitioned, the job resized) changes nothing.
//  - A failed save, or a checkpoint a restore skipped, appends an `error` event naming the cause,
//    once per fault (the `primary` rank reports it). Not fenced: like join and leave events it
//    only reports a fact and changes no state.
//
// The checkpoint on disk is the truth; the job state only describes it. So the hooks never throw:
// a record refused as stale or lost to an unreachable store is logged and counted (counts()),
// never fatal to the save or to training. A synchronous reporter's hook may block for up to the
// store's retry timeout (RedisStoreOptions::retry_timeout) on the thread that saves: for an async
// save the background writer, which the next save waits for, so a stalled store would hold
// training back at the next checkpoint step. The trainer's reporter is therefore `async`: a commit
// record is handed to a StateReport (state_report.h: retried until the store takes it, the newest
// record's step and path winning; counted when written or refused as stale, never as failed).
// An error event is always written at once (rare, and only the `primary` rank's).
//
// Example (one reporter per generation, like the communicator the saver uses):
//   CheckpointReporter reporter(ctx.store(), m.generation, m.rank);
//   options.hooks = reporter.hooks();
//   checkpoint::AsyncSaver saver(options, layout, group);   // must not outlive `reporter`
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "checkpoint/hooks.h"
#include "elastic/job_state.h"
#include "elastic/store.h"
#include "trainer/state_report.h"

namespace hdp::trainer {

class CheckpointReporter {
 public:
  // `job_store` is the job's namespace (keys relative to `hdp:<job>:`); `generation` is the
  // fencing token of the worker's current generation, `rank` its rank in it.
  CheckpointReporter(std::shared_ptr<elastic::Store> job_store, std::int64_t generation, int rank,
                     bool async = false);
  CheckpointReporter(const CheckpointReporter&) = delete;
  CheckpointReporter& operator=(const CheckpointReporter&) = delete;

  // Hooks for CheckpointOptions::hooks. They call into this reporter, which must outlive every
  // saver and restore given them. Safe to call from several threads.
  checkpoint::Hooks hooks();

  // What became of the records so far.
  struct Counts {
    int recorded = 0;  // commits and errors written to the store
    int stale = 0;     // commits refused because a newer generation exists
    int failed = 0;    // records lost: the store was unreachable or refused the write
  };
  Counts counts() const;

 private:
  void record_commit(const checkpoint::CommitInfo& info) noexcept;
  void record_error(const checkpoint::ErrorInfo& info) noexcept;

  elastic::JobState job_;
  const std::int64_t generation_;
  const int rank_;
  std::atomic<int> recorded_{0}, stale_{0}, failed_{0};
  std::unique_ptr<StateReport> async_;  // with `async`: where commit records go
};

}  // namespace hdp::trainer
