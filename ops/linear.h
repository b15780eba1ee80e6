// File: ops/linear.h
//
// A bias-free linear layer in Hugging Face's weight layout: y [n, out] = x [n, in] W^T, W [out, in].
// GEMMs go to OpenBLAS on the CPU and cuBLAS on CUDA. The backward adds dx += dy W and
// dW += dy^T x; dx may be an undefined Tensor when the input needs no gradient.
#pragma once

#include "ops/tensor.h"

namespace hdp::ops {

Tensor linear_forward(const Tensor& x, const Tensor& weight);
void linear_backward(const Tensor& x, const Tensor& weight, const Tensor& dy, const Tensor& dx, const Tensor& dweight);

}  // namespace hdp::ops
