// File: kernels/cpu/cross_entropy.h
//
// Softmax cross-entropy over logits [n, vocab] with int32 targets; a target < 0 marks a row that
// does not count (padding, the last token of a document). The loss is the SUM over counted rows
// (token-level loss: the caller divides by the step's global token count).
#pragma once

#include <cstdint>

namespace hdp::kernels::cpu {

// Writes each row's log-sum-exp into lse [n] (reused by the backward) and returns the summed loss,
// accumulated in double.
template <typename T>
double cross_entropy_forward(const T* logits, const int32_t* targets, T* lse, int64_t n, int64_t vocab);

// dlogits += dloss * (softmax(logits) - onehot(target)) on counted rows.
template <typename T>
void cross_entropy_backward(const T* logits, const int32_t* targets, const T* lse, T dloss, T* dlogits,
                            int64_t n, int64_t vocab);

}  // namespace hdp::kernels::cpu
