// File: ops/linear.h
//
// A bias-free linear layer in Hugging Face's weight layout: y [n, out] = x [n, in] W^T, W [out, in].
// GEMMs go to OpenBLAS on the CPU and cuBLAS on CUDA. The backward adds dx += dy W and
// dW += dy^T x; dx may be an undefined Tensor when the input needs no gradient.
//
// Mixed precision: with x and W in bf16 (and dy in bf16 for the backward), y, dx and dW are f32 and
// every product accumulates in f32: cuBLAS's bf16 tensor-core GEMM on CUDA; on the CPU the bf16
// operands are widened to f32 (exactly) and multiplied by OpenBLAS's sgemm, the same sums in
// another order.
#pragma once

#include "ops/tensor.h"

namespace hdp::ops {

Tensor linear_forward(const Tensor& x, const Tensor& weight);
void linear_backward(const Tensor& x, const Tensor& weight, const Tensor& dy, const Tensor& dx, const Tensor& dweight);

// A bias on every row: y [n, out] += 1 b^T for bias [out] (in the weights' dtype: bf16 under mixed
// precision) on y's device. It is the linear layer of a column of ones with weight b as [out, 1],
// so its backward is that layer's dW: dbias += dy^T 1 (dy in bias's dtype, dbias in y's).
void linear_bias_forward_(const Tensor& y, const Tensor& bias);
void linear_bias_backward(const Tensor& bias, const Tensor& dy, const Tensor& dbias);
// linear_forward(x, weight), then linear_bias_forward_ when bias is defined.
Tensor linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias);

}  // namespace hdp::ops
