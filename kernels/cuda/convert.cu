#include "kernels/cuda/convert.h"

#include <cuda_bf16.h>

#include <algorithm>

#include "kernels/cuda/check.h"

namespace hdp::kernels::cuda {
namespace {

__global__ void f32_to_bf16_kernel(const float* src, __nv_bfloat16* dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = __float2bfloat16_rn(src[i]);
}

__global__ void bf16_to_f32_kernel(const __nv_bfloat16* src, float* dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = __bfloat162float(src[i]);
}

unsigned blocks_for(int64_t n) { return static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 65535)); }

}  // namespace

void f32_to_bf16(const float* src, uint16_t* dst, int64_t n, Stream stream) {
  if (n <= 0) return;
  f32_to_bf16_kernel<<<blocks_for(n), 256, 0, native(stream)>>>(src, reinterpret_cast<__nv_bfloat16*>(dst), n);
  CUDA_CHECK(cudaGetLastError());
}

void bf16_to_f32(const uint16_t* src, float* dst, int64_t n, Stream stream) {
  if (n <= 0) return;
  bf16_to_f32_kernel<<<blocks_for(n), 256, 0, native(stream)>>>(reinterpret_cast<const __nv_bfloat16*>(src), dst, n);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace hdp::kernels::cuda
