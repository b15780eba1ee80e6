// File: tests/mesh/communicator_values.h
//
// The values the communicator tests send and check: what rank r contributes at index i (small
// integers, so that f32 and bf16 sums over a few ranks are exact), tensors filled from them in any
// dtype, the reduction every rank must end with, and uneven counts with zeros.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/cpu/bf16.h"
#include "mesh/comm/communicator.h"
#include "ops/tensor.h"

namespace hdp::mesh::test {

// What rank r contributes at index i.
inline double value(int r, std::int64_t i) { return static_cast<double>((r + 1) * ((i % 7) + 1) - 3 * (i % 2)); }

inline ops::Tensor filled(ops::DType dtype, std::int64_t n, const std::function<double(std::int64_t)>& f) {
  using ops::DType;
  ops::Tensor t = ops::Tensor::empty({n}, dtype);
  for (std::int64_t i = 0; i < n; ++i) {
    switch (dtype) {
      case DType::kF32: t.data<float>()[i] = static_cast<float>(f(i)); break;
      case DType::kF64: t.data<double>()[i] = f(i); break;
      case DType::kI32: t.data<std::int32_t>()[i] = static_cast<std::int32_t>(f(i)); break;
      case DType::kI64: t.data<std::int64_t>()[i] = static_cast<std::int64_t>(f(i)); break;
      case DType::kBF16: t.data<std::uint16_t>()[i] = kernels::cpu::f32_to_bf16(static_cast<float>(f(i))); break;
    }
  }
  return t;
}

inline double at(const ops::Tensor& t, std::int64_t i) {
  using ops::DType;
  switch (t.dtype()) {
    case DType::kF32: return t.data<float>()[i];
    case DType::kF64: return t.data<double>()[i];
    case DType::kI32: return t.data<std::int32_t>()[i];
    case DType::kI64: return static_cast<double>(t.data<std::int64_t>()[i]);
    case DType::kBF16: return kernels::cpu::bf16_to_f32(t.data<std::uint16_t>()[i]);
  }
  return NAN;
}

// The reduction of value(0..n-1, i).
inline double reduce(ReduceOp op, int n, std::int64_t i) {
  double acc = value(0, i);
  for (int r = 1; r < n; ++r) {
    const double v = value(r, i);
    acc = op == ReduceOp::kSum ? acc + v : op == ReduceOp::kMax ? std::max(acc, v) : std::min(acc, v);
  }
  return acc;
}

// Uneven counts with zeros: 0, 5, 1, 0, 3, ... (rank 0 always gets nothing).
inline std::vector<std::int64_t> uneven_counts(int n) {
  std::vector<std::int64_t> counts;
  for (int r = 0; r < n; ++r) counts.push_back((r * 5) % 7 * (r % 3 == 0 ? 0 : 1) + (r == n - 1 ? 2 : 0));
  return counts;
}

inline std::int64_t offset_of(const std::vector<std::int64_t>& counts, int r) {
  std::int64_t off = 0;
  for (int i = 0; i < r; ++i) off += counts[static_cast<std::size_t>(i)];
  return off;
}

inline std::int64_t total_of(const std::vector<std::int64_t>& counts) {
  return offset_of(counts, static_cast<int>(counts.size()));
}

}  // namespace hdp::mesh::test
