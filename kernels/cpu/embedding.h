// File: kernels/cpu/embedding.h
//
// Token embedding lookup. Token ids are validated by the caller (ops::embedding_forward).
// Backward adds into dweight (every backward in hdp accumulates, as in llm.c).
#pragma once

#include <cstdint>

namespace hdp::kernels::cpu {

// out[n, :] = weight[tokens[n], :]
template <typename T>
void embedding_forward(const int32_t* tokens, const T* weight, T* out, int64_t n, int64_t dim);

// dweight[tokens[n], :] += dout[n, :]
template <typename T>
void embedding_backward(const int32_t* tokens, const T* dout, T* dweight, int64_t n, int64_t dim);

}  // namespace hdp::kernels::cpu
