// File: kernels/cpu/bf16.h
//
// bfloat16 <-> float on the host. A bf16 is the upper 16 bits of an IEEE float; rounding is to
// nearest, ties to even, and a NaN stays a (quiet) NaN: what CUDA's __float2bfloat16_rn and
// PyTorch do, so a value rounded here equals one rounded on a GPU bit for bit.
#pragma once

#include <bit>
#include <cstdint>

namespace hdp::kernels::cpu {

inline uint16_t f32_to_bf16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0) {
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  }
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

inline float bf16_to_f32(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

// Element-wise over n values (OpenMP-parallel for large n).
void f32_to_bf16(const float* src, uint16_t* dst, int64_t n);
void bf16_to_f32(const uint16_t* src, float* dst, int64_t n);

}  // namespace hdp::kernels::cpu
