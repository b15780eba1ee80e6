// File: kernels/cuda/loss_optim.h
//
// CUDA launchers for cross-entropy, the attention merge, AdamW and the squared norm (fp32, device
// pointers, on the given stream; the two that return a sum wait for it), mirroring kernels/cpu/cross_entropy.h, attention_merge.h and adamw.h.
#pragma once

#include <cstdint>

#include "common/stream.h"

#include "kernels/cpu/adamw.h"

namespace hdp::kernels::cuda {

// Returns the summed loss (per-row losses are reduced on the host in double); blocks until done.
double cross_entropy_forward(const float* logits, const int32_t* targets, float* lse, int64_t n, int64_t vocab, Stream stream);
void cross_entropy_backward(const float* logits, const int32_t* targets, const float* lse, float dloss,
                            float* dlogits, int64_t n, int64_t vocab, Stream stream);

void attention_merge_forward(const float* out1, const float* lse1, const float* out2, const float* lse2,
                             float* out, float* lse, int64_t rows, int64_t dim, Stream stream);
void attention_merge_backward(const float* out1, const float* lse1, const float* out2, const float* lse2,
                              const float* out, const float* dout, const float* dlse, float* dout1, float* dlse1,
                              float* dout2, float* dlse2, int64_t rows, int64_t dim, Stream stream);

void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWParams& p, Stream stream);
// Blocks until done.
double sum_squares(const float* x, int64_t n, Stream stream);

}  // namespace hdp::kernels::cuda
