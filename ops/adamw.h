// File: ops/adamw.h
//
// AdamW on flat f32 buffers (a ZeRO-1 shard): decoupled weight decay, bias correction, and clipping
// by a global gradient norm the caller computes across ranks (sum_squares on each shard, all-reduce,
// sqrt) and passes in. Semantics in kernels/cpu/adamw.h.
//
// Example:
//   double norm = std::sqrt(allreduce_sum(ops::sum_squares(grad_shard)));
//   ops::adamw_step(param_shard, grad_shard, m, v, {.lr = 3e-4f, .step = t}, norm, /*max_norm=*/1.0);
#pragma once

#include "kernels/cpu/adamw.h"
#include "ops/tensor.h"

namespace hdp::ops {

using kernels::AdamWParams;

// Updates param, m and v in place (f32, or f64 on the CPU; same shape, dtype and device as grad).
// params.grad_scale is replaced by clip_scale(grad_norm, max_grad_norm); max_grad_norm <= 0 disables clipping.
void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, AdamWParams params,
                double grad_norm, double max_grad_norm);

// Sum of squares of all elements, in double.
double sum_squares(const Tensor& x);

}  // namespace hdp::ops
