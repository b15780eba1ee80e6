#include "kernels/cuda/convert.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/check.h"

namespace hdp::kernels::cuda {
namespace {

__global__ void f32_to_bf16_kernel(const float* src, __nv_bfloat16* dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = __float2bfloat16_rn(src[i]);
}

// Eight values per thread and step: two 16-byte loads, one 16-byte store (both pointers 16-byte
// aligned; n8 = groups of eight). The scalar kernel's 2-byte stores left the conversion at a fraction
// of the memory's bandwidth.
__global__ void f32_to_bf16_x8_kernel(const float4* src, uint4* dst, int64_t n8) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n8; i += int64_t(gridDim.x) * blockDim.x) {
    const float4 a = src[2 * i], b = src[2 * i + 1];
    const __nv_bfloat162 p0 = __floats2bfloat162_rn(a.x, a.y), p1 = __floats2bfloat162_rn(a.z, a.w),
                         p2 = __floats2bfloat162_rn(b.x, b.y), p3 = __floats2bfloat162_rn(b.z, b.w);
    uint4 out;
    out.x = *reinterpret_cast<const uint32_t*>(&p0);
    out.y = *reinterpret_cast<const uint32_t*>(&p1);
    out.z = *reinterpret_cast<const uint32_t*>(&p2);
    out.w = *reinterpret_cast<const uint32_t*>(&p3);
    dst[i] = out;
  }
}

__global__ void bf16_to_f32_kernel(const __nv_bfloat16* src, float* dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = __bfloat162float(src[i]);
}

unsigned blocks_for(int64_t n) { return static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 65535)); }

}  // namespace

void f32_to_bf16(const float* src, uint16_t* dst, int64_t n, Stream stream) {
  if (n <= 0) return;
  int64_t done = 0;
  if (reinterpret_cast<uintptr_t>(src) % 16 == 0 && reinterpret_cast<uintptr_t>(dst) % 16 == 0 && n >= 8) {
    const int64_t n8 = n / 8;
    f32_to_bf16_x8_kernel<<<blocks_for(n8), 256, 0, native(stream)>>>(reinterpret_cast<const float4*>(src),
                                                                        reinterpret_cast<uint4*>(dst), n8);
    CUDA_CHECK(cudaGetLastError());
    done = n8 * 8;
  }
  if (done < n) {  // the tail (or everything, unaligned)
    f32_to_bf16_kernel<<<blocks_for(n - done), 256, 0, native(stream)>>>(src + done,
                                                                         reinterpret_cast<__nv_bfloat16*>(dst) + done, n - done);
    CUDA_CHECK(cudaGetLastError());
  }
}

void bf16_to_f32(const uint16_t* src, float* dst, int64_t n, Stream stream) {
  if (n <= 0) return;
  bf16_to_f32_kernel<<<blocks_for(n), 256, 0, native(stream)>>>(reinterpret_cast<const __nv_bfloat16*>(src), dst, n);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace hdp::kernels::cuda
