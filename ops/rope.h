// File: ops/rope.h
//
// Rotary position embedding, Hugging Face LLaMA rotate-half layout (kernels/cpu/rope.h), with one
// explicit i64 position per row so a shard of a long sequence uses its global positions.
// x [n, heads, head_dim] (head_dim even), positions i64 [n] on x's device, inv_freq [head_dim/2] in
// x's dtype on x's device: the model's inverse frequencies (rope_table; LlamaConfig::rope_inv_freq
// for a scaled RoPE). Backward adds into dx.
#pragma once

#include <vector>

#include "ops/tensor.h"

namespace hdp::ops {

// Plain RoPE's inverse frequencies theta^(-2i/head_dim), i < head_dim/2, in f64.
std::vector<double> rope_default_inv_freq(double theta, int head_dim);
// A table of inverse frequencies as the kernels take it: rounded to `dtype`, on `device`.
Tensor rope_table(const std::vector<double>& inv_freq, DType dtype, Device device = Device::kCpu);

Tensor rope_forward(const Tensor& x, const Tensor& positions, const Tensor& inv_freq);
void rope_backward(const Tensor& dy, const Tensor& positions, const Tensor& inv_freq, const Tensor& dx);

}  // namespace hdp::ops
