// File: ops/cross_entropy.h
//
// Softmax cross-entropy returning the SUMMED loss over counted tokens (token-level loss: the
// trainer divides by the step's global token count). logits [n, vocab], targets i32 [n] on the same
// device, -1 = not counted. The backward adds dloss * (softmax - onehot) into dlogits.
#pragma once

#include "ops/tensor.h"

namespace hdp::ops {

struct CrossEntropyOutput {
  double loss_sum = 0;  // accumulated in double
  Tensor lse;           // [n] per-row log-sum-exp, saved for the backward
};

CrossEntropyOutput cross_entropy_forward(const Tensor& logits, const Tensor& targets);
void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, double dloss,
                            const Tensor& dlogits);

}  // namespace hdp::ops
