// The least-squares fit of α, β, γ: exact on exact data, close on noisy data, never negative, and
// clear about data it cannot fit.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "common/error.h"
#include "mesh/plan/calibration.h"
#include "mesh/plan/cost_fit.h"

namespace hdp::mesh {
namespace {

CostModel truth() {
  CostModel model;
  model.alpha_ms = 2e-5;
  model.beta_ms = 0.02;
  model.gamma_ms = 1.5;
  return model;
}

// The calibration's packings at C = 2048, timed by `model` with each time scaled by 1 + noise(i).
template <typename Noise>
std::vector<CostSample> samples_of(const CostModel& model, Noise noise) {
  std::vector<CostSample> samples;
  for (const auto& lengths : calibration_packings(2048)) {
    samples.push_back({lengths, model.micro_batch_ms(lengths, 1) * (1 + noise(samples.size()))});
  }
  return samples;
}

std::string error_of(const std::vector<CostSample>& samples) {
  CostModel model;
  try {
    fit_compute_cost(samples, model);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(CostFit, RecoversExactCoefficients) {
  const auto samples = samples_of(truth(), [](std::size_t) { return 0.0; });
  CostModel fitted;
  fitted.ring_bytes_per_token = 123;  // left alone
  fit_compute_cost(samples, fitted);
  EXPECT_NEAR(fitted.alpha_ms, 2e-5, 2e-5 * 1e-9);
  EXPECT_NEAR(fitted.beta_ms, 0.02, 0.02 * 1e-9);
  EXPECT_NEAR(fitted.gamma_ms, 1.5, 1.5 * 1e-9);
  EXPECT_EQ(fitted.ring_bytes_per_token, 123);
  for (double r : relative_residuals(fitted, samples)) EXPECT_NEAR(r, 0, 1e-9);
}

TEST(CostFit, NoisyTimesGiveCloseCoefficientsAndPredictions) {
  // ±3% alternating: about what a median of 5 timings varies by on a quiet machine.
  const auto samples = samples_of(truth(), [](std::size_t i) { return i % 2 == 0 ? 0.03 : -0.03; });
  CostModel fitted;
  fit_compute_cost(samples, fitted);
  EXPECT_NEAR(fitted.alpha_ms, 2e-5, 2e-5 * 0.1);
  EXPECT_NEAR(fitted.beta_ms, 0.02, 0.02 * 0.1);
  const std::vector<std::int64_t> held_out{1500, 300, 200, 48};
  EXPECT_NEAR(fitted.micro_batch_ms(held_out, 1) / truth().micro_batch_ms(held_out, 1), 1.0, 0.04);
  for (double r : relative_residuals(fitted, samples)) EXPECT_LT(std::abs(r), 0.05);
}

TEST(CostFit, ACoefficientTheDataPushesBelowZeroIsZero) {
  // No fixed cost, and the small micro-batches timed 10% fast: unconstrained least squares would
  // answer with γ < 0, so that a micro-batch of a few tokens would cost less than nothing.
  CostModel no_gamma = truth();
  no_gamma.gamma_ms = 0;
  const auto samples = samples_of(no_gamma, [](std::size_t i) { return i == 3 || i == 4 ? -0.10 : 0.0; });
  CostModel fitted;
  fit_compute_cost(samples, fitted);
  EXPECT_EQ(fitted.gamma_ms, 0.0);
  EXPECT_GT(fitted.alpha_ms, 0.0);
  EXPECT_GT(fitted.beta_ms, 0.0);
}

TEST(CostFit, DataItCannotFitIsNamed) {
  const auto good = samples_of(truth(), [](std::size_t) { return 0.0; });
  EXPECT_NE(error_of({good[0], good[1]}).find("at least 3"), std::string::npos);
  auto bad = good;
  bad[2].measured_ms = 0;
  EXPECT_NE(error_of(bad).find("micro-batch 2"), std::string::npos);
  bad[2].measured_ms = std::numeric_limits<double>::quiet_NaN();
  EXPECT_NE(error_of(bad).find("micro-batch 2"), std::string::npos);
  bad = good;
  bad[1].lengths.clear();
  EXPECT_NE(error_of(bad).find("micro-batch 1"), std::string::npos);
  // Two distinct micro-batches repeated: (Σs², Σs) on one line, so α, β and γ cannot be told apart.
  EXPECT_NE(error_of({good[0], good[1], good[0], good[1]}).find("apart"), std::string::npos);
}

}  // namespace
}  // namespace hdp::mesh
