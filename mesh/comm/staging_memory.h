// File: mesh/comm/staging_memory.h
//
// The host side of staging (staging_communicator.h): page-locking a host buffer, and the copies
// between a tensor on any device and a host buffer, ordered on the caller's stream. The seam
// between StagingCommunicator's logic and the CUDA runtime, like nccl_backend.h: the CMake list of
// mesh/comm picks staging_memory_cuda.cc (a build with CUDA; the one file of the staging path that
// includes cuda_runtime.h) or staging_memory_none.cc (host memory only); no other file asks.
#pragma once

#include "common/stream.h"
#include "ops/tensor.h"

namespace hdp::mesh::staging {

// Page-locks the memory of `host` (a CPU tensor that owns its storage), so that copies to and from
// a GPU run by DMA at full speed: true when it did. False in a build without CUDA, for an empty
// tensor, or when the driver refuses (no device, a limit on locked memory): the buffer then works
// as plain host memory, only slower. Undo with unpin() before the storage is freed.
bool pin(const ops::Tensor& host);
void unpin(const ops::Tensor& host) noexcept;

// host <- src (same dtype and element count; src on the CPU or a CUDA device). A device copy
// starts after the work queued on `stream` and has finished when this returns.
void to_host(const ops::Tensor& host, const ops::Tensor& src, Stream stream);

// dst <- host (dst on the CPU or a CUDA device), queued on `stream`; finished when this returns,
// so `host` may be reused at once and work queued on `stream` afterwards sees the data.
void from_host(const ops::Tensor& dst, const ops::Tensor& host, Stream stream);

}  // namespace hdp::mesh::staging
