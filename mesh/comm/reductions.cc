#include "mesh/comm/reductions.h"

#include <cstdint>
#include <string>

#include "common/error.h"

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
