#include "kernels/cpu/bf16.h"

namespace hdp::kernels::cpu {

void f32_to_bf16(const float* src, uint16_t* dst, int64_t n) {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

void bf16_to_f32(const uint16_t* src, float* dst, int64_t n) {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
}

}  // namespace hdp::kernels::cpu
