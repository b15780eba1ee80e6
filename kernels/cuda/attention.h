// File: kernels/cuda/attention.h
//
// Flash-attention-style packed varlen attention with GQA on the GPU (fp32), same layout and contract
// as kernels/cpu/attention.h: forward streams over keys with an online softmax and writes the
// per-row log-sum-exp; backward recomputes the probabilities from it. The layout's offset arrays are
// host memory and are copied to the device by the launcher, which waits for `stream` before freeing
// them.
#pragma once

#include "common/stream.h"
#include "kernels/attention_layout.h"

namespace hdp::kernels::cuda {

void attention_forward(const AttentionLayout& layout, const float* q, const float* k, const float* v, float* out,
                       float* lse, Stream stream);
void attention_backward(const AttentionLayout& layout, const float* q, const float* k, const float* v,
                        const float* out, const float* lse, const float* dout, const float* dlse, float* dq,
                        float* dk, float* dv, Stream stream);

}  // namespace hdp::kernels::cuda
