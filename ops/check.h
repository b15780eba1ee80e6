// File: ops/check.h
//
// Argument checks shared by the ops. Each throws hdp::InvalidArgument naming the op, the argument
// and its actual dtype/shape/device, e.g. "rmsnorm_forward: weight is f32[7] cpu, expected shape [8]".
// Nothing broadcasts: every shape must match exactly.
#pragma once

#include <initializer_list>
#include <string>

#include "ops/tensor.h"

namespace hdp::ops::detail {

void expect_shape(const char* op, const char* name, const Tensor& t, const Shape& shape);
void expect_rank(const char* op, const char* name, const Tensor& t, int rank);
void expect_dtype(const char* op, const char* name, const Tensor& t, DType dtype);
// t has ref's dtype and device (the "compute" dtype of the op: f32 or f64 on CPU, f32 on CUDA).
void expect_like(const char* op, const char* name, const Tensor& t, const Tensor& ref);
// ref is a defined f32/f64 tensor, and f32 when it lives on CUDA.
void expect_compute(const char* op, const char* name, const Tensor& ref);
void expect_device(const char* op, const char* name, const Tensor& t, Device device);
// One tensor argument and the exact shape it must have.
struct Arg {
  const char* name;
  const Tensor& tensor;
  Shape shape;
};
// Each argument has ref's dtype and device and exactly its shape.
void expect_args(const char* op, const Tensor& ref, std::initializer_list<Arg> args);
// Throws InvalidArgument "<op>: <message>" when !ok.
void expect(bool ok, const char* op, const std::string& message);

}  // namespace hdp::ops::detail
