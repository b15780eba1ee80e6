// The tiled CPU attention kernel against a plain O(n^2) reference written from the definition, in
// double, at sizes that cross the kernel's query and key tiles, with position offsets, both masks
// and GQA. Tolerance 1e-12 relative: both are double; only the summation order differs.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/attention.h"

namespace hdp::kernels::cpu {
namespace {

struct Case {
  const char* name;
  int64_t tq, tk;
  int heads, kv_heads;
  int64_t q_pos, k_pos;
  bool causal;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

void reference(const Case& c, int d, const std::vector<double>& q, const std::vector<double>& k,
               const std::vector<double>& v, std::vector<double>& out, std::vector<double>& lse) {
  const double scale = 1.0 / std::sqrt(double(d));
  for (int64_t i = 0; i < c.tq; ++i)
    for (int h = 0; h < c.heads; ++h) {
      const int g = h / (c.heads / c.kv_heads);
      std::vector<double> s;
      for (int64_t j = 0; j < c.tk; ++j) {
        if (c.causal && c.k_pos + j > c.q_pos + i) break;
        double dot = 0;
        for (int e = 0; e < d; ++e) dot += q[(i * c.heads + h) * d + e] * k[(j * c.kv_heads + g) * d + e];
        s.push_back(dot * scale);
      }
      double* o = &out[(i * c.heads + h) * d];
      if (s.empty()) {
        lse[i * c.heads + h] = -std::numeric_limits<double>::infinity();
        continue;
      }
      double mx = s[0], sum = 0;
      for (double x : s) mx = std::max(mx, x);
      for (double x : s) sum += std::exp(x - mx);
      lse[i * c.heads + h] = mx + std::log(sum);
      for (size_t j = 0; j < s.size(); ++j)
        for (int e = 0; e < d; ++e) o[e] += std::exp(s[j] - mx) / sum * v[(j * c.kv_heads + g) * d + e];
    }
}

class AttentionReference : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionReference, TiledKernelMatchesDefinition) {
  const Case c = GetParam();
  constexpr int kDim = 16;
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(-1, 1);
  auto fill = [&](int64_t n) {
    std::vector<double> x(static_cast<size_t>(n));
    for (double& e : x) e = u(rng);
    return x;
  };
  const std::vector<double> q = fill(c.tq * c.heads * kDim), k = fill(c.tk * c.kv_heads * kDim),
                            v = fill(c.tk * c.kv_heads * kDim);
  std::vector<double> want(q.size(), 0.0), want_lse(static_cast<size_t>(c.tq * c.heads));
  reference(c, kDim, q, k, v, want, want_lse);

  const std::vector<int32_t> cu_q{0, int32_t(c.tq)}, cu_k{0, int32_t(c.tk)};
  const std::vector<int64_t> q_pos{c.q_pos}, k_pos{c.k_pos};
  const AttentionLayout layout{c.tq, c.tk, c.heads, c.kv_heads, kDim, 1.0 / std::sqrt(double(kDim)), c.causal,
                               cu_q, cu_k, q_pos, k_pos};
  std::vector<double> out(q.size()), lse(want_lse.size());
  attention_forward<double>(layout, q.data(), k.data(), v.data(), out.data(), lse.data());
  for (size_t i = 0; i < lse.size(); ++i) {
    if (std::isinf(want_lse[i])) {
      EXPECT_EQ(lse[i], want_lse[i]) << "row " << i;
      continue;
    }
    EXPECT_NEAR(lse[i], want_lse[i], 1e-12 * std::abs(want_lse[i]) + 1e-12) << "row " << i;
  }
  for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], want[i], 1e-12) << "element " << i;
}

constexpr int64_t kQ = kAttentionQueryTile, kK = kAttentionKeyTile;

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionReference,
    ::testing::Values(Case{"SelfAttentionAcrossTiles", 2 * kQ + 70, 2 * kQ + 70, 4, 2, 0, 0, true},
                      Case{"LateQueryBlock", kQ + 70, 2 * kK + 150, 2, 1, 2 * kK + 100, 20, true},
                      Case{"KeysAfterQueriesLeaveEmptyRows", 40, kK + 130, 3, 3, 0, 50, true},
                      Case{"FullMaskMultiQuery", 33, 2 * kK + 129, 4, 1, 1000, 0, false}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace hdp::kernels::cpu
