// File: kernels/cuda/flash_attention.h
//
// Tensor-core packed varlen attention with GQA: bf16 q, k, v (and dout), fp32 accumulation, fp32
// out, LSE and gradients. The same layout and contract as kernels/cuda/attention.h (the readable
// fp32 kernel it is checked against): a query block against an offset key block, causal or not.
// FlashAttention-2's tiling on mma.sync tensor-core instructions (the .cu file's opening comment
// has the details): the forward keeps a 128-query tile's output in registers and streams 64-key
// tiles past it with an online softmax; the backward owns a 128-key tile per block, walks the
// 64-query tiles that see it, keeps dK and dV in registers and adds dQ with atomics.
//
// bf16 values are passed as their 16-bit patterns (uint16_t), so no CUDA type reaches a header
// outside this directory. head_dim must be 64 or 128; pointers must be 16-byte aligned.
#pragma once

#include <cstdint>

#include "common/stream.h"

#include "kernels/attention_layout.h"
#include "kernels/cuda/convert.h"  // f32_to_bf16, which callers use to make the inputs

namespace hdp::kernels::cuda {

// Whether the tensor-core kernels take this head_dim.
bool flash_attention_supports(int head_dim);

// out [tq, n_heads, head_dim] and lse [tq, n_heads] are written (fp32).
void flash_attention_forward(const AttentionLayout& layout, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                             float* out, float* lse, Stream stream);
// Adds into dq, dk, dv (fp32). out and lse are the forward's; dlse may be null.
void flash_attention_backward(const AttentionLayout& layout, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                              const float* out, const float* lse, const uint16_t* dout, const float* dlse, float* dq,
                              float* dk, float* dv, Stream stream);

}  // namespace hdp::kernels::cuda
