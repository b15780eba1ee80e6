// File: kernels/cpu/attention_merge.h
//
// Merging two partial attention results computed over disjoint key sets (ring attention's step):
//   lse = log(exp(lse1) + exp(lse2)),  out = w1 out1 + w2 out2,  w_i = exp(lse_i - lse).
// Rows are [rows, dim] (rows = tokens * heads), lse [rows]. A partial with lse -inf (no visible key)
// contributes nothing; when both are -inf the row stays 0 / -inf.
#pragma once

#include <cstdint>

namespace hdp::kernels::cpu {

// out/lse may alias out1/lse1 (in-place accumulation).
template <typename T>
void attention_merge_forward(const T* out1, const T* lse1, const T* out2, const T* lse2, T* out, T* lse,
                             int64_t rows, int64_t dim);

// Given dout (and dlse, may be null for zero), adds the gradients of both partials:
//   dout_i += w_i dout,  dlse_i += w_i (dlse + dout . (out_i - out)).
template <typename T>
void attention_merge_backward(const T* out1, const T* lse1, const T* out2, const T* lse2, const T* out,
                              const T* dout, const T* dlse, T* dout1, T* dlse1, T* dout2, T* dlse2,
                              int64_t rows, int64_t dim);

}  // namespace hdp::kernels::cpu
