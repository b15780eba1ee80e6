// File: mesh/comm/reductions.h
//
// The reduction tables of hdp's collectives (collectives.h): one combine function per dtype and
// op (f32, f64, i32, i64, bf16 with sum, max, min), and the ops' names for messages.
#pragma once

#include <cstddef>

#include "mesh/comm/communicator.h"
#include "ops/dtype.h"

namespace hdp::mesh {

// out[i] = a[i] (op) b[i] for i < n; out may be a or b.
using Combine = void (*)(void* out, const void* a, const void* b, std::size_t n);

// InvalidArgument for a dtype that cannot be reduced or an op that is not sum, max or min.
Combine combine_for(ops::DType dtype, ReduceOp op);

// "sum", "max", "min"; "?" for any other value.
const char* op_name(ReduceOp op);

}  // namespace hdp::mesh
