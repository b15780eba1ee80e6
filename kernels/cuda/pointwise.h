// File: kernels/cuda/pointwise.h
//
// CUDA launchers for the row-wise and elementwise ops (fp32, device pointers, queued on
// the stream given last: every launcher of kernels/cuda takes one and returns without waiting for it).
// Each mirrors the CPU kernel of the same name in kernels/cpu/ (the reference the gpu tests compare
// against); backward launchers add into their gradient outputs like the CPU ones.
#pragma once

#include <cstdint>

#include "common/stream.h"

namespace hdp::kernels::cuda {

void embedding_forward(const int32_t* tokens, const float* weight, float* out, int64_t n, int64_t dim, Stream stream);
void embedding_backward(const int32_t* tokens, const float* dout, float* dweight, int64_t n, int64_t dim, Stream stream);

void rmsnorm_forward(const float* x, const float* weight, float* y, float* rstd, int64_t n, int64_t dim,
                     double eps, Stream stream);
void rmsnorm_backward(const float* x, const float* weight, const float* rstd, const float* dy, float* dx,
                      float* dweight, int64_t n, int64_t dim, Stream stream);

void rope_forward(const float* x, const int64_t* positions, float* y, int64_t n, int heads, int head_dim,
                  const float* inv_freq, Stream stream);
void rope_backward(const float* dy, const int64_t* positions, float* dx, int64_t n, int heads, int head_dim,
                   const float* inv_freq, Stream stream);

void swiglu_forward(const float* gate, const float* up, float* h, int64_t n, Stream stream);
void swiglu_backward(const float* gate, const float* up, const float* dh, float* dgate, float* dup, int64_t n, Stream stream);

}  // namespace hdp::kernels::cuda
