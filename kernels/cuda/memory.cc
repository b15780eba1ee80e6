#include "kernels/cuda/memory.h"

#include "kernels/cuda/check.h"

#include <cstdint>
#include <cstring>

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

bool memory_info(size_t& free_bytes, size_t& total_bytes) noexcept {
  if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) return true;
  cudaGetLastError();
  return false;
}

namespace {

// Up to this size a copy from pageable memory is staged in a pinned block; a larger one (a model's
// initial weights, a restored shard) is rare and would pin its whole size for the process's life.
constexpr size_t kStagedUpTo = size_t{64} << 20;

bool is_pinned_host(const void* ptr) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, ptr) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attributes.type == cudaMemoryTypeHost;
}

}  // namespace

// From pageable memory, cudaMemcpy first waits for every kernel queued on the device, and the device
// then idles while the host launches the next ones: the batch's tables and tokens of every micro-batch
// did that. Staged instead: the bytes go to a pinned block at once (the source is free on return) and
// the copy is queued on the legacy default stream, ahead of every later kernel on a blocking stream;
// the block goes back to the pool behind it (pinned_pool.cc). A pinned source is the caller's to
// reuse once this returns, so its copy stays synchronous.
void copy_host_to_device(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  if (bytes <= kStagedUpTo && !is_pinned_host(src)) {
    if (void* staging = host_alloc_pinned(bytes)) {
      std::memcpy(staging, src, bytes);
      const cudaError_t queued = cudaMemcpyAsync(dst, staging, bytes, cudaMemcpyHostToDevice, cudaStreamLegacy);
      host_free_pinned(staging);
      CUDA_CHECK(queued);
      return;
    }
  }
  CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
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
