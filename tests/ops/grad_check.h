// File: tests/ops/grad_check.h
//
// Finite-difference gradient checks for the ops. An op under test is a pair of functions over a list
// of differentiable inputs: forward returns its outputs, backward takes the output cotangents and
// returns input gradients. The scalar checked is L = sum_j <out_j, R_j> with fixed random R_j, so
// dL/d(out_j) = R_j and every output (including an LSE) is covered.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "ops/tensor.h"

namespace hdp::ops::testing {

using Tensors = std::vector<Tensor>;
using ForwardFn = std::function<Tensors(const Tensors& inputs)>;
// Returns one gradient per input (zeros where an op does not produce one).
using BackwardFn = std::function<Tensors(const Tensors& inputs, const Tensors& outputs, const Tensors& cotangents)>;

// Uniform in [lo, hi), deterministic in seed, as f64 or f32.
Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed, double lo = -1.0, double hi = 1.0);
// An f64 <-> f32 copy of a CPU tensor.
Tensor cast(const Tensor& t, DType dtype);
// ||a - b|| / max(||a||, ||b||, 1e-30) over all elements, in double; non-finite entries where both
// tensors hold the same infinity (an empty attention row's LSE) are skipped.
double rel_error(const Tensor& a, const Tensor& b);

struct GradCheckResult {
  std::vector<double> f64_vs_numeric;  // per input: analytic f64 gradient vs central differences
  std::vector<double> f32_vs_f64_grad; // per input: the f32 path's gradient vs the f64 one
  std::vector<double> f32_vs_f64_out;  // per output: the f32 forward vs the f64 forward
};

// Runs both checks on f64 `inputs` (the f32 path gets them rounded to f32).
GradCheckResult grad_check(const ForwardFn& forward, const BackwardFn& backward, const Tensors& inputs,
                           uint64_t seed);

// Asserts the bounds: 1e-6 against finite differences, 1e-4 between f32 and f64.
void expect_grad_check_passes(const GradCheckResult& r);

}  // namespace hdp::ops::testing
