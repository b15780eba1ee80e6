// File: ops/rmsnorm.h
//
// RMSNorm over the last dimension, Hugging Face LLaMA numerics (kernels/cpu/rmsnorm.h):
// x [n, dim], weight [dim] -> y [n, dim] and rstd [n] (saved for the backward).
// The backward adds into dx and dweight.
#pragma once

#include "ops/tensor.h"

namespace hdp::ops {

struct RmsNormOutput {
  Tensor y;
  Tensor rstd;
};

RmsNormOutput rmsnorm_forward(const Tensor& x, const Tensor& weight, double eps);
void rmsnorm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& dy, const Tensor& dx,
                      const Tensor& dweight);

}  // namespace hdp::ops
