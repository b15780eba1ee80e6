// File: kernels/cpu/rmsnorm.h
//
// RMSNorm as Hugging Face LLaMA computes it: y = weight * (x * rsqrt(mean(x^2) + eps)), the
// statistics in the input precision (fp32 for the fp32 path), no bias. Rows are [n, dim].
#pragma once

#include <cstdint>

namespace hdp::kernels::cpu {

// Writes y [n, dim] and the per-row reciprocal RMS rstd [n], which the backward reuses.
template <typename T>
void rmsnorm_forward(const T* x, const T* weight, T* y, T* rstd, int64_t n, int64_t dim, double eps);

// Adds into dx [n, dim] and dweight [dim].
template <typename T>
void rmsnorm_backward(const T* x, const T* weight, const T* rstd, const T* dy, T* dx, T* dweight, int64_t n,
                      int64_t dim);

}  // namespace hdp::kernels::cpu
