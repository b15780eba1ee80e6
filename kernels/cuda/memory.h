// File: kernels/cuda/memory.h
//
// Device memory for hdp::ops::Tensor: allocation, copies and fills on the current device. Every call
// is synchronous with respect to the host (the default stream), so a returned host buffer is ready.
#pragma once

#include <cstddef>

namespace hdp::kernels::cuda {

// Number of usable CUDA devices; 0 when there is no device or no driver (never throws).
int device_count();

void* device_alloc(size_t bytes);
void device_free(void* ptr) noexcept;
void copy_host_to_device(void* dst, const void* src, size_t bytes);
void copy_device_to_host(void* dst, const void* src, size_t bytes);
void copy_device_to_device(void* dst, const void* src, size_t bytes);
void device_zero(void* ptr, size_t bytes);
// Waits until every kernel launched so far has finished (benchmarks time around it).
void device_synchronize();

}  // namespace hdp::kernels::cuda
