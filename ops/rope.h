// File: ops/rope.h
//
// Rotary position embedding, Hugging Face LLaMA rotate-half layout (kernels/cpu/rope.h), with one
// explicit i64 position per row so a shard of a long sequence uses its global positions.
// x [n, heads, head_dim] (head_dim even), positions i64 [n] on x's device. Backward adds into dx.
#pragma once

#include "ops/tensor.h"

namespace hdp::ops {

Tensor rope_forward(const Tensor& x, const Tensor& positions, double theta);
void rope_backward(const Tensor& dy, const Tensor& positions, double theta, const Tensor& dx);

}  // namespace hdp::ops
