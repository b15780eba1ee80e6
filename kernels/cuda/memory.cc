#include "kernels/cuda/memory.h"

#include "kernels/cuda/check.h"

#include <cstdint>

namespace hdp::kernels::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // "no device" / "no driver" is an answer here, not an error to keep
    return 0;
  }
  return n;
}

// Before the first allocation (the worker binds its device at start): keep_freed_memory() below
// configures the pool of the device current at the first allocation.
void set_device(int ordinal) { CUDA_CHECK(cudaSetDevice(ordinal)); }

namespace {

// The device's default memory pool keeps what is freed (release threshold: unlimited), so the
// many short-lived tensors of a step reuse memory instead of calling into the driver; set once.
void keep_freed_memory() {
  static const bool done = [] {
    int device = 0;
    cudaMemPool_t pool = nullptr;
    if (cudaGetDevice(&device) == cudaSuccess && cudaDeviceGetDefaultMemPool(&pool, device) == cudaSuccess) {
      std::uint64_t threshold = UINT64_MAX;
      cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold);
    }
    cudaGetLastError();  // a device without pools still allocates; nothing to keep then
    return true;
  }();
  (void)done;
}

}  // namespace

// Stream-ordered on the legacy default stream, which orders itself with every blocking stream (the
// ones stream_create makes): an allocation is ready for work queued after it on any of them, and a
// free waits for the work queued before it. cudaMalloc/cudaFree instead synchronise the whole
// device at every free, which serialised a step's kernels with its host.
void* device_alloc(size_t bytes) {
  void* ptr = nullptr;
  if (bytes == 0) return ptr;
  keep_freed_memory();
  CUDA_CHECK(cudaMallocAsync(&ptr, bytes, cudaStreamLegacy));
  return ptr;
}

void device_free(void* ptr) noexcept {
  if (ptr) cudaFreeAsync(ptr, cudaStreamLegacy);  // a destructor path: nothing useful to do with an error here
}

void* host_alloc_pinned(size_t bytes) noexcept {
  void* ptr = nullptr;
  if (bytes == 0 || cudaMallocHost(&ptr, bytes) != cudaSuccess) {
    cudaGetLastError();  // refused: the caller uses plain host memory
    return nullptr;
  }
  return ptr;
}

void host_free_pinned(void* ptr) noexcept {
  if (ptr) cudaFreeHost(ptr);
}

bool memory_info(size_t& free_bytes, size_t& total_bytes) noexcept {
  if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) return true;
  cudaGetLastError();
  return false;
}

void copy_host_to_device(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

void copy_host_to_device(void* dst, const void* src, size_t bytes, Stream stream) {
  if (bytes > 0) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, native(stream)));
}

void copy_device_to_host(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

void copy_device_to_host(void* dst, const void* src, size_t bytes, Stream stream) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, native(stream)));
  CUDA_CHECK(cudaStreamSynchronize(native(stream)));
}

void copy_device_to_device(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));
}

void device_zero(void* ptr, size_t bytes) {
  if (bytes > 0) CUDA_CHECK(cudaMemset(ptr, 0, bytes));
}

void device_synchronize() { CUDA_CHECK(cudaDeviceSynchronize()); }

Stream stream_create() {
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreate(&stream));
  return Stream{stream};
}

void stream_destroy(Stream stream) noexcept {
  if (stream.handle != nullptr) cudaStreamDestroy(native(stream));
}

void stream_synchronize(Stream stream) { CUDA_CHECK(cudaStreamSynchronize(native(stream))); }

}  // namespace hdp::kernels::cuda
