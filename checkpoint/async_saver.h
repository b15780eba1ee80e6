// File: checkpoint/async_saver.h
//
// Asynchronous save: the training thread only copies its shard into host staging buffers
// (memcpy here; device-to-host once shards live on a GPU), and one background thread per rank
// writes and commits through Saver.
//
// Policy, at most one save in flight: save() called while the previous save is still being
// written first WAITS for it to finish, then stages. It never skips: a skip decided by one rank
// alone would leave the ranks in different collectives. The time spent waiting is returned, so a
// trainer that checkpoints more often than the disk allows sees it.
//
// A failed background save leaves the previous committed checkpoint intact; it is reported
// through Hooks::on_error (and the log) on the thread that writes, and by wait().
#pragma once

#include <array>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "checkpoint/saver.h"

namespace hdp::checkpoint {

struct StageTiming {
  double wait_seconds = 0;  // blocked on the previous save
  double copy_seconds = 0;  // copying into the staging buffers: the stall of a save
};

class AsyncSaver {
 public:
  // Starts the writer thread. `group` must outlive the saver and is used from the writer thread
  // only (the trainer gives the checkpoint its own communicator or group).
  AsyncSaver(CheckpointOptions options, FlatLayout layout, Group& group);
  // Waits for the save in flight, then stops the writer thread.
  ~AsyncSaver();
  AsyncSaver(const AsyncSaver&) = delete;
  AsyncSaver& operator=(const AsyncSaver&) = delete;

  // Collective like Saver::save, but returns once `shard` is staged; the caller may then modify
  // its buffers. Blocks while a previous save is in flight (see the policy above). Throws
  // InvalidArgument when the shard does not fit the layout.
  StageTiming save(const ShardSnapshot& shard);

  // Blocks until no save is in flight; false when the last save failed on this rank.
  bool wait();

 private:
  void run();

  Saver saver_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool busy_ = false;     // guarded by mutex_: a staged save is waiting for or in the writer
  bool stop_ = false;     // guarded by mutex_
  bool last_ok_ = true;   // guarded by mutex_
  // Written by save() while !busy_, read by the writer while busy_: busy_ hands them over.
  std::array<std::vector<float>, kBufferCount> staging_;
  ShardSnapshot staged_;
  std::thread writer_;  // last member: starts after everything it uses exists
};

}  // namespace hdp::checkpoint
