// File: ops/convert.h
//
// Element type conversion between f32 and bf16, the seam of mixed precision: the model's bf16
// operands (its weights' compute copy, the inputs of its GEMMs and attention) are made from f32
// values here, and the bf16 buffers that cross the wire (mesh/step/zero.h) go back to f32 here.
// f32 -> bf16 rounds to nearest, ties to even, on either device (the same bits on both).
//
// Example:
//   Tensor xb = to_dtype(x, DType::kBF16);   // a new bf16 tensor on x's device
//   convert_into(xb, x.view(0, {n}));        // back into f32 storage
#pragma once

#include "ops/tensor.h"

namespace hdp::ops {

// Writes src's elements into dst (same element count and device; f32 <-> bf16, or a copy when
// the dtypes agree). InvalidArgument for other dtypes, counts or devices.
void convert_into(const Tensor& src, const Tensor& dst);
// A new tensor of `dtype` on src's device holding src's elements converted.
Tensor to_dtype(const Tensor& src, DType dtype);

}  // namespace hdp::ops
