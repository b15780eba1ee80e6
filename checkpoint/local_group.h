// File: checkpoint/local_group.h
//
// Ranks as threads of one process: one LocalGroupState shared by `world_size` threads, each with
// its own LocalGroup view. Used by tests and the benchmark; the trainer passes its communicator.
#pragma once

#include <atomic>
#include <barrier>
#include <functional>
#include <memory>

#include "checkpoint/group.h"

namespace hdp::checkpoint {

class LocalGroupState {
 public:
  explicit LocalGroupState(int world_size);
  int world_size() const { return world_size_; }

 private:
  friend class LocalGroup;
  struct Completion {
    LocalGroupState* state;
    void operator()() noexcept;
  };
  int world_size_;
  // Written by arriving threads (any_false_) and by the completion step (result_), which
  // std::barrier runs after all arrivals and before any thread is released: the barrier orders them.
  std::atomic<bool> any_false_{false};
  std::atomic<bool> result_{true};
  std::barrier<Completion> barrier_;
};

class LocalGroup final : public Group {
 public:
  LocalGroup(std::shared_ptr<LocalGroupState> state, int rank) : state_(std::move(state)), rank_(rank) {}
  int rank() const override { return rank_; }
  int world_size() const override { return state_->world_size(); }
  void barrier() override { state_->barrier_.arrive_and_wait(); }
  bool all_true(bool local) override;

 private:
  std::shared_ptr<LocalGroupState> state_;
  int rank_;
};

// Runs fn(group) on `world_size` threads, one per rank, and joins them; rethrows the first
// exception a rank threw (after all joined). Every rank must reach the same collectives, even when
// it fails (Saver and restore_latest do), or the others wait forever.
void run_ranks(int world_size, const std::function<void(Group&)>& fn);

}  // namespace hdp::checkpoint
