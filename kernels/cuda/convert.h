// File: kernels/cuda/convert.h
//
// f32 <-> bf16 on the device, queued on `stream`: rounding to nearest, ties to even (the host's
// kernels/cpu/bf16.h rounds the same, bit for bit). bf16 values are their 16-bit patterns.
#pragma once

#include <cstdint>

#include "common/stream.h"

namespace hdp::kernels::cuda {

void f32_to_bf16(const float* src, uint16_t* dst, int64_t n, Stream stream);
void bf16_to_f32(const uint16_t* src, float* dst, int64_t n, Stream stream);

}  // namespace hdp::kernels::cuda
