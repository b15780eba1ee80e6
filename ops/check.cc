#include "ops/check.h"

#include "common/error.h"

namespace hdp::ops::detail {

void expect(bool ok, const char* op, const std::string& message) {
  if (!ok) throw InvalidArgument(std::string(op) + ": " + message);
}

void expect_shape(const char* op, const char* name, const Tensor& t, const Shape& shape) {
  expect(t.defined() && t.shape() == shape, op,
         std::string(name) + " is " + t.describe() + ", expected shape " + shape_string(shape));
}

void expect_rank(const char* op, const char* name, const Tensor& t, int rank) {
  expect(t.defined() && t.rank() == rank, op,
         std::string(name) + " is " + t.describe() + ", expected rank " + std::to_string(rank));
}

void expect_dtype(const char* op, const char* name, const Tensor& t, DType dtype) {
  expect(t.defined() && t.dtype() == dtype, op,
         std::string(name) + " is " + t.describe() + ", expected dtype " + dtype_name(dtype));
}

void expect_device(const char* op, const char* name, const Tensor& t, Device device) {
  expect(t.defined() && t.device() == device, op,
         std::string(name) + " is " + t.describe() + ", expected device " + device_name(device));
}

void expect_compute(const char* op, const char* name, const Tensor& ref) {
  expect(ref.defined() && (ref.dtype() == DType::kF32 || ref.dtype() == DType::kF64), op,
         std::string(name) + " is " + ref.describe() + ", expected f32 or f64");
  expect(ref.device() == Device::kCpu || ref.dtype() == DType::kF32, op,
         std::string(name) + " is " + ref.describe() + ", CUDA ops take f32 only");
}

void expect_like(const char* op, const char* name, const Tensor& t, const Tensor& ref) {
  expect(t.defined() && t.dtype() == ref.dtype() && t.device() == ref.device(), op,
         std::string(name) + " is " + t.describe() + ", expected " + dtype_name(ref.dtype()) + " on " +
             device_name(ref.device()));
}

void expect_args(const char* op, const Tensor& ref, std::initializer_list<Arg> args) {
  for (const Arg& a : args) {
    expect_like(op, a.name, a.tensor, ref);
    expect_shape(op, a.name, a.tensor, a.shape);
  }
}

}  // namespace hdp::ops::detail
