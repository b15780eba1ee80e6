// File: kernels/cuda/memory.h
//
// Device memory for hdp::ops::Tensor: allocation, copies and fills on the current device, on the legacy
// default stream, which every blocking stream (stream_create's) is ordered with. A copy to the host
// returns with the host buffer ready (the one that takes a stream waits for that stream's work). A
// copy to the device returns with the source free to reuse; from pageable memory (up to 64 MiB) it is
// queued without waiting for the device (staged through pinned memory: memory.cc), so the device's
// later work sees it but the host does not wait for the device's earlier work.
#pragma once

#include <cstddef>

#include "common/stream.h"

namespace hdp::kernels::cuda {

// Number of usable CUDA devices; 0 when there is no device or no driver (never throws).
int device_count();
// Makes `ordinal` the calling thread's current device (cudaSetDevice).
void set_device(int ordinal);

void* device_alloc(size_t bytes);
void device_free(void* ptr) noexcept;
void copy_host_to_device(void* dst, const void* src, size_t bytes);
// Queued on `stream` instead: the host does not wait for the device's earlier work. `src` may be
// reused once this returns (the driver stages pageable memory before returning).
void copy_host_to_device(void* dst, const void* src, size_t bytes, Stream stream);
void copy_device_to_host(void* dst, const void* src, size_t bytes);
void copy_device_to_host(void* dst, const void* src, size_t bytes, Stream stream);
void copy_device_to_device(void* dst, const void* src, size_t bytes);
void device_zero(void* ptr, size_t bytes);
// Page-locked host memory (cudaMallocHost): copies between it and a device run by DMA and may be
// queued without the host waiting. nullptr when the driver refuses (no device, a locked-memory
// limit): the caller then falls back to plain host memory. Free it with host_free_pinned, which keeps
// it for reuse once the copies queued before the free on the legacy default stream or on a blocking
// stream (stream_create's) are done (pinned_pool.cc): a copy on a non-blocking stream (NCCL's) must
// be waited for before the free. host_pinned_held_bytes is what the process holds so, handed out
// or idle; the pool never gives memory back.
void* host_alloc_pinned(size_t bytes) noexcept;
void host_free_pinned(void* ptr) noexcept;
size_t host_pinned_held_bytes();
// The current device's free and total memory in bytes (cudaMemGetInfo); false when it cannot say.
bool memory_info(size_t& free_bytes, size_t& total_bytes) noexcept;
// Waits until every kernel launched so far has finished (benchmarks time around it).
void device_synchronize();

// A new stream, blocking with respect to the legacy default stream (so Tensor's allocations, fills
// and copies, which use that one, stay ordered with the kernels queued on it); destroy it with
// stream_destroy. stream_synchronize waits for the work queued on a stream.
Stream stream_create();
void stream_destroy(Stream stream) noexcept;
void stream_synchronize(Stream stream);

}  // namespace hdp::kernels::cuda
