// File: trainer/data/ordered_pipeline.cc
//
// Batches encoded in parallel, handed back in order: see ordered_pipeline.h.
#include "trainer/data/ordered_pipeline.h"

#include <exception>
#include <utility>

namespace hdp::trainer::data {

OrderedPipeline::OrderedPipeline(DocumentSource& source, int threads)
    : source_(source), window_(2 * static_cast<std::uint64_t>(threads) + 2) {
  workers_.reserve(static_cast<std::size_t>(threads));
  for (int t = 0; t < threads; ++t) workers_.emplace_back([this] { work(); });
}

OrderedPipeline::~OrderedPipeline() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

bool OrderedPipeline::next(EncodedBatch& result, std::chrono::steady_clock::time_point deadline, bool& timed_out) {
  std::unique_lock lock(mutex_);
  timed_out = false;
  const auto ready = [&] { return results_.count(next_write_) > 0 || (exhausted_ && next_write_ == next_take_); };
  if (!done_cv_.wait_until(lock, deadline, ready)) {
    timed_out = true;
    return false;
  }
  const auto it = results_.find(next_write_);
  if (it == results_.end()) return false;
  result = std::move(it->second);
  results_.erase(it);
  ++next_write_;
  lock.unlock();
  work_cv_.notify_all();
  return true;
}

bool OrderedPipeline::take(std::unique_lock<std::mutex>& lock, DocumentBatch& batch, std::uint64_t& id) {
  work_cv_.wait(lock, [&] { return stop_ || exhausted_ || next_take_ < next_write_ + window_; });
  if (stop_ || exhausted_) return false;
  id = next_take_;
  bool more = false;
  try {
    more = source_.next(batch);
  } catch (...) {
    EncodedBatch failed;
    failed.error = std::current_exception();
    results_.emplace(id, std::move(failed));
    more = false;
    ++next_take_;
  }
  if (!more) {
    exhausted_ = true;
    lock.unlock();
    done_cv_.notify_all();
    work_cv_.notify_all();
    return false;
  }
  ++next_take_;
  return true;
}

void OrderedPipeline::work() {
  for (;;) {
    DocumentBatch batch;
    std::uint64_t id = 0;
    {
      std::unique_lock lock(mutex_);
      if (!take(lock, batch, id)) return;
    }
    EncodedBatch result;
    try {
      source_.process(batch, result);
    } catch (...) {
      result.error = std::current_exception();
    }
    {
      std::lock_guard lock(mutex_);
      results_.emplace(id, std::move(result));
    }
    done_cv_.notify_all();
  }
}

}  // namespace hdp::trainer::data
