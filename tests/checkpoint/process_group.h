// File: tests/checkpoint/process_group.h
//
// Ranks as forked processes: each child holds one end of a socketpair and talks to a coordinator
// in the parent. A collective is one byte up (the rank's vote) and one byte down (the AND of all
// votes). A rank that dies (EOF) makes every later collective answer false on the others, which is
// what a communicator that detects a lost peer does.
#pragma once

#include <sys/types.h>

#include <functional>
#include <vector>

#include "checkpoint/group.h"

namespace hdp::checkpoint::test {

class PipeGroup final : public Group {
 public:
  PipeGroup(int fd, int rank, int world_size) : fd_(fd), rank_(rank), world_size_(world_size) {}
  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  // Throws PeerLost when the answer is false: a barrier cannot complete without every rank.
  void barrier() override;
  bool all_true(bool local) override;

 private:
  int fd_;
  int rank_;
  int world_size_;
};

// Forks `world_size` children that each run fn(group) and _exit with 0, or 3 when fn threw.
// Coordinates their collectives until all of them have exited or died; `on_started` runs in the
// parent, on another thread, right after the forks (to pause or kill a child). Returns the wait
// statuses by rank. Call it from a single-threaded process: it forks.
std::vector<int> run_process_ranks(int world_size, const std::function<void(Group&)>& fn,
                                   const std::function<void(const std::vector<pid_t>&)>& on_started = {});

}  // namespace hdp::checkpoint::test
