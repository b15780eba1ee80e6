// File: kernels/cpu/rope.h
//
// Rotary position embedding in Hugging Face LLaMA's rotate-half layout: for i < D/2,
//   y[i]       = x[i] cos(a_i) - x[i + D/2] sin(a_i)
//   y[i + D/2] = x[i + D/2] cos(a_i) + x[i] sin(a_i),   a_i = pos * inv_freq[i]
// with the angle computed in T as HF does in fp32. inv_freq (D/2 entries) is the model's table:
// theta^(-2i/D), or that rescaled by RoPE scaling (ops/model/llama_config.h). Positions are explicit per row, so a shard of a
// long sequence rotates with its global positions. x is [n, heads, head_dim].
#pragma once

#include <cstdint>

namespace hdp::kernels::cpu {

template <typename T>
void rope_forward(const T* x, const int64_t* positions, T* y, int64_t n, int heads, int head_dim,
                  const T* inv_freq);

// The rotation is orthogonal, so the backward rotates dy by -a and adds it into dx.
template <typename T>
void rope_backward(const T* dy, const int64_t* positions, T* dx, int64_t n, int heads, int head_dim,
                   const T* inv_freq);

}  // namespace hdp::kernels::cpu
