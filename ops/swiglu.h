// File: ops/swiglu.h
//
// The LLaMA MLP's gate: h = silu(gate) * up, gate and up of equal shape. Backward adds into dgate
// and dup. (The whole MLP is down(swiglu(gate(x), up(x))) with three linear_forward calls.)
#pragma once

#include "ops/tensor.h"

namespace hdp::ops {

Tensor swiglu_forward(const Tensor& gate, const Tensor& up);
void swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& dh, const Tensor& dgate, const Tensor& dup);

}  // namespace hdp::ops
