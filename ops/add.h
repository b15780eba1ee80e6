// File: ops/add.h
//
// dst += src for two tensors of the same shape, dtype and device (the residual connections).
#pragma once

#include "ops/tensor.h"

namespace hdp::ops {

void add_(const Tensor& dst, const Tensor& src);

}  // namespace hdp::ops
