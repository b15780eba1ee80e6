#include "tests/ops/grad_check.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

namespace hdp::ops::testing {

Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed, double lo, double hi) {
  Tensor t = Tensor::empty(shape, DType::kF64);
  double* p = t.data<double>();
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < t.numel(); ++i) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    p[i] = lo + (hi - lo) * (double(s >> 11) * 0x1.0p-53);
  }
  return cast(t, dtype);
}

Tensor cast(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t.clone();
  Tensor out = Tensor::empty(t.shape(), dtype);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (dtype == DType::kF32)
      out.data<float>()[i] = static_cast<float>(t.data<double>()[i]);
    else
      out.data<double>()[i] = t.data<float>()[i];
  }
  return out;
}

namespace {

std::vector<double> as_doubles(const Tensor& t) {
  if (t.dtype() == DType::kF64) return t.to_vector<double>();
  std::vector<float> f = t.to_vector<float>();
  return {f.begin(), f.end()};
}

// sum <out_j, R_j>, skipping non-finite outputs (an LSE of -inf has no gradient).
double project(const Tensors& outputs, const Tensors& cotangents) {
  double total = 0;
  for (size_t j = 0; j < outputs.size(); ++j) {
    const std::vector<double> o = as_doubles(outputs[j]), r = as_doubles(cotangents[j]);
    for (size_t i = 0; i < o.size(); ++i)
      if (std::isfinite(o[i])) total += o[i] * r[i];
  }
  return total;
}

// Cotangents with zeros where the output is not finite, so backward sees no gradient there.
Tensors make_cotangents(const Tensors& outputs, uint64_t seed) {
  Tensors r;
  for (size_t j = 0; j < outputs.size(); ++j) {
    Tensor c = random_tensor(outputs[j].shape(), DType::kF64, seed + 101 * (j + 1));
    const std::vector<double> o = as_doubles(outputs[j]);
    for (size_t i = 0; i < o.size(); ++i)
      if (!std::isfinite(o[i])) c.data<double>()[i] = 0;
    r.push_back(c);
  }
  return r;
}

}  // namespace

double rel_error(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = as_doubles(a), y = as_doubles(b);
  EXPECT_EQ(x.size(), y.size());
  double diff = 0, nx = 0, ny = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i]) || !std::isfinite(y[i])) {
      if (x[i] != y[i]) return INFINITY;
      continue;
    }
    diff += (x[i] - y[i]) * (x[i] - y[i]);
    nx += x[i] * x[i];
    ny += y[i] * y[i];
  }
  return std::sqrt(diff) / std::max({std::sqrt(nx), std::sqrt(ny), 1e-30});
}

GradCheckResult grad_check(const ForwardFn& forward, const BackwardFn& backward, const Tensors& inputs,
                           uint64_t seed) {
  GradCheckResult r;
  const Tensors outputs = forward(inputs);
  const Tensors cot = make_cotangents(outputs, seed);
  const Tensors grads = backward(inputs, outputs, cot);

  // Central differences: truncation error h^2/6 |f'''| ~ 1e-10 and rounding eps |L| / h ~ 1e-10 with
  // h = 1e-5, four orders below the 1e-6 bound.
  constexpr double kH = 1e-5;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor numeric = Tensor::zeros(inputs[i].shape(), DType::kF64);
    double* x = inputs[i].data<double>();
    for (int64_t e = 0; e < inputs[i].numel(); ++e) {
      const double saved = x[e];
      x[e] = saved + kH;
      const double up = project(forward(inputs), cot);
      x[e] = saved - kH;
      const double down = project(forward(inputs), cot);
      x[e] = saved;
      numeric.data<double>()[e] = (up - down) / (2 * kH);
    }
    r.f64_vs_numeric.push_back(rel_error(grads[i], numeric));
  }

  Tensors inputs32, cot32;
  for (const Tensor& t : inputs) inputs32.push_back(cast(t, DType::kF32));
  for (const Tensor& t : cot) cot32.push_back(cast(t, DType::kF32));
  const Tensors outputs32 = forward(inputs32);
  const Tensors grads32 = backward(inputs32, outputs32, cot32);
  for (size_t j = 0; j < outputs.size(); ++j) r.f32_vs_f64_out.push_back(rel_error(outputs32[j], outputs[j]));
  for (size_t i = 0; i < inputs.size(); ++i) r.f32_vs_f64_grad.push_back(rel_error(grads32[i], grads[i]));
  return r;
}

void expect_grad_check_passes(const GradCheckResult& r) {
  for (size_t i = 0; i < r.f64_vs_numeric.size(); ++i) EXPECT_LE(r.f64_vs_numeric[i], 1e-6) << "input " << i;
  // f32 carries ~6e-8 relative rounding per operation; a few hundred accumulated terms stay well
  // under 1e-4 (the bound for the f32 path against the f64 one).
  for (size_t i = 0; i < r.f32_vs_f64_grad.size(); ++i) EXPECT_LE(r.f32_vs_f64_grad[i], 1e-4) << "input " << i;
  for (size_t j = 0; j < r.f32_vs_f64_out.size(); ++j) EXPECT_LE(r.f32_vs_f64_out[j], 1e-4) << "output " << j;
}

}  // namespace hdp::ops::testing
