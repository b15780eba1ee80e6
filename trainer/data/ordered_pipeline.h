// File: trainer/data/ordered_pipeline.h
//
// The encoding threads of `hdp tokenize` (tokenize.h): each worker takes the next batch of a
// DocumentSource (document_sources.h) in batch order, under the pipeline's lock, and encodes it
// outside the lock; the calling thread takes the results back in batch order, whatever order the
// workers finished in, so the output is the same for any number of threads. At most `window`
// batches (2 * threads + 2) are taken beyond the one being written, which bounds memory. An
// exception of next() or process() is carried in the batch's EncodedBatch::error and is the
// caller's to throw when that batch's turn comes; a failing next() ends the batches. The
// destructor stops the workers once their batch in hand is done and joins them.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "trainer/data/document_sources.h"

namespace hdp::trainer::data {

class OrderedPipeline {
 public:
  // `source` must outlive the pipeline; `threads` >= 1.
  OrderedPipeline(DocumentSource& source, int threads);
  ~OrderedPipeline();
  OrderedPipeline(const OrderedPipeline&) = delete;
  OrderedPipeline& operator=(const OrderedPipeline&) = delete;

  // The next result in batch order; false when every batch was handed out. Waits at most until
  // `deadline`, then returns false with `timed_out` set.
  bool next(EncodedBatch& result, std::chrono::steady_clock::time_point deadline, bool& timed_out);

 private:
  void work();
  // Takes the next batch under the lock (`lock` held); false when the worker is to end.
  bool take(std::unique_lock<std::mutex>& lock, DocumentBatch& batch, std::uint64_t& id);

  DocumentSource& source_;
  const std::uint64_t window_;
  std::mutex mutex_;
  std::condition_variable work_cv_, done_cv_;
  std::uint64_t next_take_ = 0, next_write_ = 0;
  bool exhausted_ = false, stop_ = false;
  std::map<std::uint64_t, EncodedBatch> results_;
  std::vector<std::thread> workers_;  // last: they start once the members above exist
};

}  // namespace hdp::trainer::data
