// File: ops/dtype.h
//
// Element types and devices of hdp::ops::Tensor. f32 is the training type (and the master weights of
// mixed precision), bf16 the operands of mixed precision's GEMMs and attention (ops/convert.h) and
// what crosses the wire in it, f64 exists for the gradient checks, i32/i64 carry token ids and
// positions. A bf16 element is held as its 16-bit pattern (uint16_t: data<uint16_t>()), so no
// compiler's or CUDA's bf16 type reaches a header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace hdp::ops {

enum class DType { kF32, kF64, kI32, kI64, kBF16 };
enum class Device { kCpu, kCuda };

size_t dtype_size(DType dtype);
std::string dtype_name(DType dtype);
std::string device_name(Device device);

// The DType of a C++ element type (float, double, int32_t, int64_t; uint16_t: bf16 bit patterns).
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
template <>
constexpr DType dtype_of<uint16_t>() { return DType::kBF16; }

}  // namespace hdp::ops
