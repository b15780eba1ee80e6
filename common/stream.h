// File: common/stream.h
//
// Where device work is ordered: a CUDA stream (cudaStream_t) as an opaque handle, so that no header
// above kernels/cuda includes cuda_runtime.h. Null is the default stream. CPU code ignores it.
// Kernels (kernels/cuda), ops (ops/dispatch.h's current stream) and communicators
// (mesh/comm/communicator.h) all take this one type.
#pragma once

namespace hdp {

struct Stream {
  void* handle = nullptr;
};

}  // namespace hdp
