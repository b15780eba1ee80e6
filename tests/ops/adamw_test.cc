// AdamW on flat buffers against a hand-computed step, clipping by a caller-supplied norm, and
// the squared norm.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/adamw.h"

namespace hdp::ops {
namespace {

// One parameter, two steps, written out from the AdamW definition (Loshchilov & Hutter, PyTorch's
// torch.optim.AdamW): decay first, then the bias-corrected Adam update. Float tolerance 1e-6
// relative: a handful of f32 operations on O(1) values.
TEST(AdamW, MatchesTheDefinitionOverTwoSteps) {
  const AdamWParams p{.lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.99f, .eps = 1e-8f, .weight_decay = 0.01f};
  Tensor w = Tensor::from_vector<float>({1.0f}, {1}), m = Tensor::zeros({1}, DType::kF32), v = m.clone();
  double want = 1.0, mm = 0, vv = 0;
  const float grads[2] = {0.5f, -0.25f};
  for (int t = 1; t <= 2; ++t) {
    AdamWParams pt = p;
    pt.step = t;
    adamw_step(w, Tensor::from_vector<float>({grads[t - 1]}, {1}), m, v, pt, 0, 0);
    const double g = grads[t - 1];
    mm = 0.9 * mm + 0.1 * g;
    vv = 0.99 * vv + 0.01 * g * g;
    const double mhat = mm / (1 - std::pow(0.9, t)), vhat = vv / (1 - std::pow(0.99, t));
    want -= 0.1 * (0.01 * want + mhat / (std::sqrt(vhat) + 1e-8));
    EXPECT_NEAR(w.to_vector<float>()[0], want, 1e-6) << "step " << t;
  }
}

TEST(AdamW, ClipsByTheSuppliedGlobalNorm) {
  // Adam is scale-invariant in g after the first step only up to eps, so compare the moments:
  // with norm 10 and max 1 the stored first moment is (1 - beta1) * g / 10.
  Tensor w = Tensor::zeros({2}, DType::kF32), m = w.clone(), v = w.clone();
  const Tensor g = Tensor::from_vector<float>({6.0f, 8.0f}, {2});
  adamw_step(w, g, m, v, {.lr = 0.0f, .beta1 = 0.5f}, std::sqrt(sum_squares(g)), 1.0);
  const std::vector<float> mv = m.to_vector<float>();
  EXPECT_NEAR(mv[0], 0.5 * 0.6, 1e-6);
  EXPECT_NEAR(mv[1], 0.5 * 0.8, 1e-6);
  Tensor m2 = Tensor::zeros({2}, DType::kF32), v2 = m2.clone();
  adamw_step(w, g, m2, v2, {.lr = 0.0f, .beta1 = 0.5f}, 10.0, 0.0);  // max_norm 0: no clipping
  EXPECT_NEAR(m2.to_vector<float>()[1], 0.5 * 8.0, 1e-6);
}

TEST(AdamW, SumSquares) {
  EXPECT_DOUBLE_EQ(sum_squares(Tensor::from_vector<float>({3, 4, 12}, {3})), 169.0);
  EXPECT_DOUBLE_EQ(sum_squares(Tensor::from_vector<double>({0.5, -0.5}, {2})), 0.5);
}

}  // namespace
}  // namespace hdp::ops
