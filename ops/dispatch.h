// File: ops/dispatch.h
//
// Picks the CPU kernel instantiation for an f32 or f64 tensor: dispatch_cpu(x, [&](auto tag) {...})
// calls the lambda with a float{} or double{} tag whose type names the element type. The CUDA
// branch of each op is written out beside it under `#if HDP_HAVE_CUDA` (CUDA kernels are f32 only).
#pragma once

#include "common/error.h"
#include "ops/tensor.h"

namespace hdp::ops::detail {

template <typename F>
decltype(auto) dispatch_cpu(const Tensor& x, F&& f) {
  if (x.dtype() == DType::kF64) return f(double{});
  if (x.dtype() == DType::kF32) return f(float{});
  throw InvariantViolation("dispatch_cpu: " + x.describe() + " passed the op's checks but is not f32/f64");
}

}  // namespace hdp::ops::detail
