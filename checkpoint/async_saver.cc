#include "checkpoint/async_saver.h"

#include <chrono>
#include <cstring>

#include "common/error.h"

namespace hdp::checkpoint {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

}  // namespace

AsyncSaver::AsyncSaver(CheckpointOptions options, FlatLayout layout, Group& group)
    : saver_(std::move(options), std::move(layout), group), writer_([this] { run(); }) {}

AsyncSaver::~AsyncSaver() {
  {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [this] { return !busy_; });
    stop_ = true;
  }
  changed_.notify_all();
  writer_.join();
}

StageTiming AsyncSaver::save(const ShardSnapshot& shard) {
  for (std::size_t b = 0; b < kBufferCount; ++b) {
    if (std::ssize(shard.buffers[b]) != shard.range.size()) {
      throw InvalidArgument("async save: " + std::string(kBufferNames[b]) + " holds " +
                            std::to_string(shard.buffers[b].size()) + " elements, the shard range " +
                            std::to_string(shard.range.size()));
    }
  }
  StageTiming timing;
  const auto start = Clock::now();
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [this] { return !busy_; });
  timing.wait_seconds = seconds_since(start);

  const auto copy_start = Clock::now();
  for (std::size_t b = 0; b < kBufferCount; ++b) {
    staging_[b].resize(shard.buffers[b].size());
    std::memcpy(staging_[b].data(), shard.buffers[b].data(), shard.buffers[b].size_bytes());
    staged_.buffers[b] = staging_[b];
  }
  staged_.range = shard.range;
  staged_.step = shard.step;
  staged_.rng_state = shard.rng_state;
  staged_.data = shard.data;
  timing.copy_seconds = seconds_since(copy_start);

  busy_ = true;
  lock.unlock();
  changed_.notify_all();
  return timing;
}

bool AsyncSaver::wait() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [this] { return !busy_; });
  return last_ok_;
}

void AsyncSaver::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [this] { return busy_ || stop_; });
    if (!busy_) return;  // stop_ and nothing staged
    lock.unlock();
    bool ok = true;
    try {
      saver_.save(staged_);
    } catch (const std::exception&) {
      ok = false;  // Saver already logged it and called the error hook
    }
    lock.lock();
    last_ok_ = ok;
    busy_ = false;
    changed_.notify_all();
  }
}

}  // namespace hdp::checkpoint
