// File: ops/current_stream.h
//
// The stream the calling thread's ops queue their CUDA kernels on (null: the default stream). A
// StreamScope sets it for a block and restores the one before; CPU ops ignore it.
//
// Example:
//   ops::StreamScope scope(Stream{compute_stream});
//   auto y = ops::rmsnorm_forward(x, w, eps);   // queued on compute_stream
#pragma once

#include "common/stream.h"

namespace hdp::ops {

Stream current_stream();

class StreamScope {
 public:
  explicit StreamScope(Stream stream);
  ~StreamScope();
  StreamScope(const StreamScope&) = delete;
  StreamScope& operator=(const StreamScope&) = delete;

 private:
  Stream previous_;
};

}  // namespace hdp::ops
