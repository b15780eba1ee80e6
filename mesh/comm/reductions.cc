#include "mesh/comm/reductions.h"

#include <cstdint>
#include <string>

#include "common/error.h"
#include "kernels/cpu/bf16.h"

namespace hdp::mesh {
namespace {

// ---- reductions: out[i] = a[i] (op) b[i]; out may be a or b ------------------------------------
template <typename T, ReduceOp Op>
void combine(void* out, const void* a, const void* b, std::size_t n) {
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  for (std::size_t i = 0; i < n; ++i) {
    if constexpr (Op == ReduceOp::kSum) o[i] = x[i] + y[i];
    if constexpr (Op == ReduceOp::kMax) o[i] = x[i] < y[i] ? y[i] : x[i];
    if constexpr (Op == ReduceOp::kMin) o[i] = y[i] < x[i] ? y[i] : x[i];
  }
}

// bf16 (16-bit patterns): each pair widened to f32, combined, rounded back to nearest even, as NCCL
// reduces bf16 at every hop.
template <ReduceOp Op>
void combine_bf16(void* out, const void* a, const void* b, std::size_t n) {
  std::uint16_t* o = static_cast<std::uint16_t*>(out);
  const std::uint16_t* x = static_cast<const std::uint16_t*>(a);
  const std::uint16_t* y = static_cast<const std::uint16_t*>(b);
  for (std::size_t i = 0; i < n; ++i) {
    const float u = kernels::cpu::bf16_to_f32(x[i]), v = kernels::cpu::bf16_to_f32(y[i]);
    float r = 0;
    if constexpr (Op == ReduceOp::kSum) r = u + v;
    if constexpr (Op == ReduceOp::kMax) r = u < v ? v : u;
    if constexpr (Op == ReduceOp::kMin) r = v < u ? v : u;
    o[i] = kernels::cpu::f32_to_bf16(r);
  }
}

Combine combine_bf16_for(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return &combine_bf16<ReduceOp::kSum>;
    case ReduceOp::kMax: return &combine_bf16<ReduceOp::kMax>;
    case ReduceOp::kMin: return &combine_bf16<ReduceOp::kMin>;
  }
  throw InvalidArgument("reduce op " + std::to_string(static_cast<int>(op)) + " is not sum, max or min");
}

template <typename T>
Combine combine_for(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return &combine<T, ReduceOp::kSum>;
    case ReduceOp::kMax: return &combine<T, ReduceOp::kMax>;
    case ReduceOp::kMin: return &combine<T, ReduceOp::kMin>;
  }
  throw InvalidArgument("reduce op " + std::to_string(static_cast<int>(op)) + " is not sum, max or min");
}

}  // namespace

Combine combine_for(ops::DType dtype, ReduceOp op) {
  switch (dtype) {
    case ops::DType::kF32: return combine_for<float>(op);
    case ops::DType::kF64: return combine_for<double>(op);
    case ops::DType::kI32: return combine_for<std::int32_t>(op);
    case ops::DType::kI64: return combine_for<std::int64_t>(op);
    case ops::DType::kBF16: return combine_bf16_for(op);
  }
  throw InvalidArgument("dtype " + std::to_string(static_cast<int>(dtype)) + " cannot be reduced");
}

const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
  }
  return "?";
}

}  // namespace hdp::mesh
