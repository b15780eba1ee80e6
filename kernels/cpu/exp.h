// File: kernels/cpu/exp.h
//
// The softmax exponentials of the attention tiles: x[i] = exp(x[i] - shift) in place, returning
// the sum. They dominated the CPU attention (a scalar expf costs as much as a tile's 2*head_dim
// multiply-adds per score), so the float version is a branch-free polynomial (Cephes expf, relative
// error < 3e-7, about 2 ulp) that vectorises, compiled for AVX-512, AVX2 and baseline x86-64 and
// picked at load time. The double version (gradient checks) calls std::exp.
#pragma once

#include <cstdint>

namespace hdp::kernels::cpu {

float exp_shift_sum(float* x, int64_t n, float shift);
double exp_shift_sum(double* x, int64_t n, double shift);

}  // namespace hdp::kernels::cpu
