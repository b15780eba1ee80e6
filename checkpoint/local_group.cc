#include "checkpoint/local_group.h"

#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "common/error.h"

namespace hdp::checkpoint {

void LocalGroupState::Completion::operator()() noexcept {
  state->result_ = !state->any_false_.exchange(false);
}

LocalGroupState::LocalGroupState(int world_size)
    : world_size_(world_size), barrier_(world_size, Completion{this}) {
  if (world_size < 1) throw InvalidArgument("local group: world size " + std::to_string(world_size) + " must be >= 1");
}

bool LocalGroup::all_true(bool local) {
  if (!local) state_->any_false_ = true;
  state_->barrier_.arrive_and_wait();
  // result_ changes again only when every thread, this one included, has arrived at a later phase.
  return state_->result_;
}

void run_ranks(int world_size, const std::function<void(Group&)>& fn) {
  auto state = std::make_shared<LocalGroupState>(world_size);
  std::mutex mutex;
  std::exception_ptr first;  // guarded by mutex
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r) {
    threads.emplace_back([&, r] {
      LocalGroup group(state, r);
      try {
        fn(group);
      } catch (...) {
        std::lock_guard lock(mutex);
        if (!first) first = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace hdp::checkpoint
