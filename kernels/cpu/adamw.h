// File: kernels/cpu/adamw.h
//
// AdamW on flat buffers (one call per ZeRO-1 shard): decoupled weight decay, bias correction, and
// gradient clipping by a global norm that the caller supplies (it spans every rank's shard).
#pragma once

#include <cstdint>

namespace hdp::kernels {

struct AdamWParams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  int64_t step = 1;         // 1-based step number for the bias correction
  float grad_scale = 1.0f;  // multiplies every gradient: the clipping factor (see clip_scale)
};

// min(1, max_norm / (norm + 1e-6)): the factor that brings a gradient of global norm `norm` to at
// most `max_norm`; max_norm <= 0 disables clipping.
float clip_scale(double norm, double max_norm);

}  // namespace hdp::kernels

namespace hdp::kernels::cpu {

// m = b1 m + (1-b1) g'; v = b2 v + (1-b2) g'^2 with g' = grad_scale * g;
// p -= lr * (wd * p + mhat / (sqrt(vhat) + eps)). Computed in T (float for training; double for
// the distributed step's exactness tests).
template <typename T>
void adamw_step(T* param, const T* grad, T* m, T* v, int64_t n, const AdamWParams& p);

// Sum of squares of x, accumulated in double: each rank's part of the global gradient norm.
template <typename T>
double sum_squares(const T* x, int64_t n);

}  // namespace hdp::kernels::cpu
