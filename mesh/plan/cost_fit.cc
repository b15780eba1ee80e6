#include "mesh/plan/cost_fit.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string>

#include "common/error.h"

namespace hdp::mesh {
namespace {

constexpr std::size_t kTerms = 3;  // α (regressor Σs²), β (Σs), γ (1)
using Vector = std::array<double, kTerms>;

Vector regressors(std::span<const std::int64_t> lengths) {
  double squares = 0;
  double tokens = 0;
  for (std::int64_t s : lengths) {
    squares += static_cast<double>(s) * static_cast<double>(s);
    tokens += static_cast<double>(s);
  }
  return {squares, tokens, 1.0};
}

// The weighted problem min Σ_i (Σ_j c_j·x_ij/t_i − 1)² as normal equations A·c' = b over columns
// scaled to a largest entry of 1 (Σs² reaches 10⁷ where 1 is 1), so that A is well conditioned;
// c_j = c'_j / scale_j.
struct NormalEquations {
  std::array<Vector, kTerms> a{};
  Vector b{};
  Vector scale{};
};

NormalEquations normal_equations(std::span<const CostSample> samples) {
  NormalEquations n;
  std::vector<Vector> rows;
  for (const CostSample& sample : samples) {
    Vector row = regressors(sample.lengths);
    for (std::size_t j = 0; j < kTerms; ++j) {
      row[j] /= sample.measured_ms;
      n.scale[j] = std::max(n.scale[j], row[j]);
    }
    rows.push_back(row);
  }
  for (Vector& row : rows) {
    for (std::size_t j = 0; j < kTerms; ++j) row[j] /= n.scale[j];
    for (std::size_t j = 0; j < kTerms; ++j) {
      n.b[j] += row[j];
      for (std::size_t k = 0; k < kTerms; ++k) n.a[j][k] += row[j] * row[k];
    }
  }
  return n;
}

// Solves the equations of the terms in `mask` (bit j: term j is free, the others are 0) by Gaussian
// elimination with partial pivoting. Returns false when that system is singular.
bool solve(const NormalEquations& n, unsigned mask, Vector& c) {
  std::array<std::size_t, kTerms> terms{};
  std::size_t k = 0;
  for (std::size_t j = 0; j < kTerms; ++j) {
    if ((mask >> j) & 1U) terms[k++] = j;
  }
  std::array<std::array<double, kTerms + 1>, kTerms> m{};
  for (std::size_t r = 0; r < k; ++r) {
    for (std::size_t col = 0; col < k; ++col) m[r][col] = n.a[terms[r]][terms[col]];
    m[r][k] = n.b[terms[r]];
  }
  const double tiny = 1e-12 * n.a[terms[0]][terms[0]];
  for (std::size_t i = 0; i < k; ++i) {
    std::size_t pivot = i;
    for (std::size_t r = i + 1; r < k; ++r) {
      if (std::abs(m[r][i]) > std::abs(m[pivot][i])) pivot = r;
    }
    std::swap(m[i], m[pivot]);
    if (std::abs(m[i][i]) <= tiny) return false;
    for (std::size_t r = 0; r < k; ++r) {
      if (r == i) continue;
      const double f = m[r][i] / m[i][i];
      for (std::size_t col = i; col <= k; ++col) m[r][col] -= f * m[i][col];
    }
  }
  c = {};
  for (std::size_t i = 0; i < k; ++i) c[terms[i]] = m[i][k] / m[i][i] / n.scale[terms[i]];
  return true;
}

void set_coefficients(const Vector& c, CostModel& model) {
  model.alpha_ms = c[0];
  model.beta_ms = c[1];
  model.gamma_ms = c[2];
}

double squared_relative_error(const CostModel& model, std::span<const CostSample> samples) {
  double sum = 0;
  for (double r : relative_residuals(model, samples)) sum += r * r;
  return sum;
}

}  // namespace

void fit_compute_cost(std::span<const CostSample> samples, CostModel& model) {
  if (samples.size() < kTerms) {
    throw InvalidArgument("cost fit: needs at least 3 timed micro-batches, got " + std::to_string(samples.size()));
  }
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const double t = samples[i].measured_ms;
    if (!std::isfinite(t) || t <= 0 || regressors(samples[i].lengths)[1] <= 0) {
      throw InvalidArgument("cost fit: micro-batch " + std::to_string(i) +
                            " needs tokens and a measured time > 0, got " + std::to_string(t) + " ms");
    }
  }
  const NormalEquations n = normal_equations(samples);
  constexpr unsigned kAll = (1U << kTerms) - 1;
  Vector c{};
  if (!solve(n, kAll, c)) {
    throw InvalidArgument(
        "cost fit: the micro-batches cannot tell α, β and γ apart; time more lengths and packings");
  }
  const auto non_negative = [](const Vector& v) {
    return std::all_of(v.begin(), v.end(), [](double x) { return x >= 0; });
  };
  if (non_negative(c)) {
    set_coefficients(c, model);
    return;
  }
  // The unconstrained optimum has a negative coefficient, so the constrained one lies on a face:
  // the best of the faces' own optima that are >= 0 (a single free term always is).
  CostModel candidate = model;
  double best_error = std::numeric_limits<double>::infinity();
  for (unsigned mask = 1; mask < kAll; ++mask) {
    if (!solve(n, mask, c) || !non_negative(c)) continue;
    set_coefficients(c, candidate);
    const double error = squared_relative_error(candidate, samples);
    if (error < best_error) {
      best_error = error;
      set_coefficients(c, model);
    }
  }
}

std::vector<double> relative_residuals(const CostModel& model, std::span<const CostSample> samples) {
  std::vector<double> out;
  out.reserve(samples.size());
  for (const CostSample& sample : samples) {
    out.push_back(model.micro_batch_ms(sample.lengths, 1) / sample.measured_ms - 1);
  }
  return out;
}

}  // namespace hdp::mesh
