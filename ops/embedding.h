// File: ops/embedding.h
//
// Token embedding: out [n, dim] = weight[tokens], tokens i32 [n] on weight's device, each in
// [0, vocab). The backward adds into dweight (every hdp backward accumulates, as in llm.c, so the
// caller zeroes gradients once per step and micro-batches add up).
#pragma once

#include "ops/tensor.h"

namespace hdp::ops {

Tensor embedding_forward(const Tensor& tokens, const Tensor& weight);
void embedding_backward(const Tensor& tokens, const Tensor& dout, const Tensor& dweight);

}  // namespace hdp::ops
