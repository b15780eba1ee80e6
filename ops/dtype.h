// File: ops/dtype.h
//
// Element types and devices of hdp::ops::Tensor. f32 is the training type, f64 exists for the
// gradient checks, i32/i64 carry token ids and positions; bf16 would be one more enumerator.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace hdp::ops {

enum class DType { kF32, kF64, kI32, kI64 };
enum class Device { kCpu, kCuda };

size_t dtype_size(DType dtype);
std::string dtype_name(DType dtype);
std::string device_name(Device device);

// The DType of a C++ element type (float, double, int32_t, int64_t).
template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() { return DType::kF32; }
template <>
constexpr DType dtype_of<double>() { return DType::kF64; }
template <>
constexpr DType dtype_of<int32_t>() { return DType::kI32; }
template <>
constexpr DType dtype_of<int64_t>() { return DType::kI64; }

}  // namespace hdp::ops
