#include "kernels/cuda/memory.h"

#include "kernels/cuda/check.h"

namespace hdp::kernels::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // "no device" / "no driver" is an answer here, not an error to keep
    return 0;
  }
  return n;
}

void* device_alloc(size_t bytes) {
  void* ptr = nullptr;
  if (bytes > 0) CUDA_CHECK(cudaMalloc(&ptr, bytes));
  return ptr;
}

void device_free(void* ptr) noexcept {
  if (ptr) cudaFree(ptr);  // a destructor path: nothing useful to do with an error here
}

void copy_host_to_device(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
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
