// The vectorised float exp of the attention softmax against std::exp in double.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/exp.h"

namespace hdp::kernels::cpu {
namespace {

TEST(ExpShiftSum, FloatIsWithinFourUlpOfExpAndSumsWhatItWrites) {
  // Every softmax argument is <= 0 after the max shift; cover [-80, 0] densely plus a positive tail.
  std::vector<float> x;
  for (int i = 0; i <= 200000; ++i) x.push_back(-80.0f + 88.0f * float(i) / 200000.0f);
  const std::vector<float> in = x;
  const float shift = 0.25f;
  const float sum = exp_shift_sum(x.data(), int64_t(x.size()), shift);
  double max_rel = 0, want_sum = 0, got_sum = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = std::exp(double(in[i] - shift));  // the shift is applied in float, as the kernel does
    max_rel = std::max(max_rel, std::abs(x[i] - want) / want);
    want_sum += want;
    got_sum += x[i];
  }
  EXPECT_LE(max_rel, 4 * 5.96e-8);  // 4 ulp (float epsilon / 2 = 5.96e-8)
  EXPECT_NEAR(sum, got_sum, 1e-5 * got_sum);
  EXPECT_NEAR(got_sum, want_sum, 1e-6 * want_sum);
}

TEST(ExpShiftSum, DoubleIsStdExp) {
  std::vector<double> x{-1.0, 0.0, 2.5};
  const double sum = exp_shift_sum(x.data(), 3, 0.5);
  EXPECT_EQ(x[1], std::exp(-0.5));
  EXPECT_DOUBLE_EQ(sum, std::exp(-1.5) + std::exp(-0.5) + std::exp(2.0));
}

}  // namespace
}  // namespace hdp::kernels::cpu
