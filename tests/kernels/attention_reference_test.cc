// The tiled CPU attention kernel, forward and backward, against a plain O(n^2) reference written
// from the definition, in double, at sizes that cross the kernel's query and key tiles (and so the
// causally cut diagonal tiles it splits into row blocks), with position offsets, both masks and
// GQA. Tolerances 1e-12 (forward) and 1e-10 (gradients, sums over hundreds of terms): both sides are
// double; only the summation order differs.
#include <gtest/gtest.h>
#include <omp.h>

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

// Gradients by the definition, given the forward's lse: P = exp(S - lse), dP = dO V^T,
// dS = P (dP - rowsum(P dP)), dQ = scale dS K, dK = scale dS^T Q, dV = P^T dO.
void reference_backward(const Case& c, int d, const std::vector<double>& q, const std::vector<double>& k,
                        const std::vector<double>& v, const std::vector<double>& lse, const std::vector<double>& dout,
                        std::vector<double>& dq, std::vector<double>& dk, std::vector<double>& dv) {
  const double scale = 1.0 / std::sqrt(double(d));
  for (int64_t i = 0; i < c.tq; ++i)
    for (int h = 0; h < c.heads; ++h) {
      const int g = h / (c.heads / c.kv_heads);
      const double* qi = &q[(i * c.heads + h) * d];
      const double* doi = &dout[(i * c.heads + h) * d];
      std::vector<double> p, dp;
      for (int64_t j = 0; j < c.tk; ++j) {
        if (c.causal && c.k_pos + j > c.q_pos + i) break;
        double dot = 0, dpj = 0;
        for (int e = 0; e < d; ++e) {
          dot += qi[e] * k[(j * c.kv_heads + g) * d + e];
          dpj += doi[e] * v[(j * c.kv_heads + g) * d + e];
        }
        p.push_back(std::exp(dot * scale - lse[i * c.heads + h]));
        dp.push_back(dpj);
      }
      double delta = 0;
      for (size_t j = 0; j < p.size(); ++j) delta += p[j] * dp[j];
      for (size_t j = 0; j < p.size(); ++j) {
        const double ds = p[j] * (dp[j] - delta);
        const int64_t kj = (int64_t(j) * c.kv_heads + g) * d;
        for (int e = 0; e < d; ++e) {
          dq[(i * c.heads + h) * d + e] += scale * ds * k[kj + e];
          dk[kj + e] += scale * ds * qi[e];
          dv[kj + e] += p[j] * doi[e];
        }
      }
    }
}

class AttentionReference : public ::testing::TestWithParam<Case> {
 protected:
  static constexpr int kDim = 16;
  void SetUp() override {
    c = GetParam();
    std::mt19937 rng(5);
    std::uniform_real_distribution<double> u(-1, 1);
    auto fill = [&](int64_t n) {
      std::vector<double> x(static_cast<size_t>(n));
      for (double& e : x) e = u(rng);
      return x;
    };
    q = fill(c.tq * c.heads * kDim);
    k = fill(c.tk * c.kv_heads * kDim);
    v = fill(c.tk * c.kv_heads * kDim);
    dout = fill(c.tq * c.heads * kDim);
    cu_q = {0, int32_t(c.tq)};
    cu_k = {0, int32_t(c.tk)};
    q_pos = {c.q_pos};
    k_pos = {c.k_pos};
    layout = AttentionLayout{c.tq, c.tk, c.heads, c.kv_heads, kDim, 1.0 / std::sqrt(double(kDim)), c.causal,
                             cu_q, cu_k, q_pos, k_pos};
  }

  Case c;
  std::vector<double> q, k, v, dout;
  std::vector<int32_t> cu_q, cu_k;
  std::vector<int64_t> q_pos, k_pos;
  AttentionLayout layout;
};

TEST_P(AttentionReference, TiledKernelMatchesDefinition) {
  std::vector<double> want(q.size(), 0.0), want_lse(static_cast<size_t>(c.tq * c.heads));
  reference(c, kDim, q, k, v, want, want_lse);
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

TEST_P(AttentionReference, TiledBackwardMatchesDefinition) {
  std::vector<double> out(q.size(), 0.0), lse(static_cast<size_t>(c.tq * c.heads));
  reference(c, kDim, q, k, v, out, lse);
  std::vector<double> want_dq(q.size(), 0.0), want_dk(k.size(), 0.0), want_dv(v.size(), 0.0);
  reference_backward(c, kDim, q, k, v, lse, dout, want_dq, want_dk, want_dv);
  // The kernel takes one pass over (sequence, kv head) tasks when there are at least twice as many
  // as threads, else two passes over tiles: one thread makes the cases with several kv heads take
  // the first path, eight threads make every case here take the second.
  const int threads_before = omp_get_max_threads();
  for (int threads : {1, 8}) {
    omp_set_num_threads(threads);
    std::vector<double> dq(q.size(), 0.0), dk(k.size(), 0.0), dv(v.size(), 0.0);
    attention_backward<double>(layout, q.data(), k.data(), v.data(), out.data(), lse.data(), dout.data(), nullptr,
                               dq.data(), dk.data(), dv.data());
    for (size_t i = 0; i < dq.size(); ++i) ASSERT_NEAR(dq[i], want_dq[i], 1e-10) << threads << " thread(s), dq " << i;
    for (size_t i = 0; i < dk.size(); ++i) ASSERT_NEAR(dk[i], want_dk[i], 1e-10) << threads << " thread(s), dk " << i;
    for (size_t i = 0; i < dv.size(); ++i) ASSERT_NEAR(dv[i], want_dv[i], 1e-10) << threads << " thread(s), dv " << i;
  }
  omp_set_num_threads(threads_before);
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
