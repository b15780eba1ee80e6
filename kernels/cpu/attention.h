// File: kernels/cpu/attention.h
//
// Packed variable-length attention with GQA on the CPU (layout in kernels/attention_layout.h),
// flash-attention style: query tiles stream over key tiles with an online softmax, every tile product
// is a small GEMM through OpenBLAS, and the per-row log-sum-exp is returned so that partial results
// over different key blocks can be merged (attention_merge.h) and differentiated exactly.
//
// Tensors: q, out, dout, dq [tq, n_heads, head_dim]; k, v, dk, dv [tk, n_kv_heads, head_dim];
// lse, dlse [tq, n_heads].
#pragma once

#include "kernels/attention_layout.h"

namespace hdp::kernels::cpu {

// The kernel's tile sizes (query rows x keys; attention.cc says why), public so that tests can
// place sequence lengths across tile boundaries.
inline constexpr int64_t kAttentionQueryTile = 256;
inline constexpr int64_t kAttentionKeyTile = 256;

template <typename T>
void attention_forward(const AttentionLayout& layout, const T* q, const T* k, const T* v, T* out, T* lse);

// Adds into dq, dk, dv. `out` and `lse` are those the loss saw (for ring attention: the merged
// result); dlse, the gradient reaching lse, may be null for zero. Two passes recompute the scores
// (one owns dq rows, one owns dk/dv rows) so no two threads write the same gradient element.
template <typename T>
void attention_backward(const AttentionLayout& layout, const T* q, const T* k, const T* v, const T* out,
                        const T* lse, const T* dout, const T* dlse, T* dq, T* dk, T* dv);

}  // namespace hdp::kernels::cpu
