// The OpenMP paths (split GEMM panels, parallel attention tiles, parallel rows) give the same
// results as one thread, at sizes above the parallel thresholds. The other test binaries run with
// one thread (tests/ops/serial_openmp.cc), so this file is where the parallel code is exercised.
// Tolerance: f32 results within 1e-6 relative (GEMM panels may block the reduction differently);
// the row-parallel kernels are bitwise identical.
#include <gtest/gtest.h>
#include <omp.h>

#include <random>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/rmsnorm.h"

namespace hdp::kernels::cpu {
namespace {

std::vector<float> random_vec(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> x(n);
  for (float& e : x) e = u(rng);
  return x;
}

double rel(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, n = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    n += double(b[i]) * b[i];
  }
  return std::sqrt(d / n);
}

// Runs f with 1 and then 2 OpenMP threads and returns both results.
template <typename F>
std::pair<std::vector<float>, std::vector<float>> serial_and_parallel(F&& f) {
  omp_set_num_threads(1);
  std::vector<float> one = f();
  omp_set_num_threads(2);
  std::vector<float> two = f();
  omp_set_num_threads(1);
  return {one, two};
}

TEST(ParallelConsistency, GemmPanelsEveryTransposeAndSplitSide) {
  for (const auto& [m, n, k] : {std::tuple{200, 96, 64}, std::tuple{48, 300, 80}})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const std::vector<float> a = random_vec(size_t(m * k), 1), b = random_vec(size_t(k * n), 2);
        auto run = [&] {
          std::vector<float> c(size_t(m * n), 0.5f);
          gemm<float>(ta, tb, m, n, k, 1.5f, a.data(), ta ? m : k, b.data(), tb ? k : n, 0.25f, c.data(), n);
          return c;
        };
        // The single-threaded result against a naive loop, then the panel split against it.
        const auto [one, two] = serial_and_parallel(run);
        std::vector<float> naive(size_t(m * n));
        for (int i = 0; i < m; ++i)
          for (int j = 0; j < n; ++j) {
            double s = 0;
            for (int e = 0; e < k; ++e)
              s += double(ta ? a[size_t(e * m + i)] : a[size_t(i * k + e)]) *
                   (tb ? b[size_t(j * k + e)] : b[size_t(e * n + j)]);
            naive[size_t(i * n + j)] = float(1.5 * s + 0.25 * 0.5);
          }
        EXPECT_LE(rel(one, naive), 1e-6) << m << "x" << n << " ta=" << ta << " tb=" << tb;
        EXPECT_LE(rel(two, one), 1e-6) << m << "x" << n << " ta=" << ta << " tb=" << tb;
      }
}

TEST(ParallelConsistency, AttentionForwardAndBackward) {
  const int64_t t = 300;
  const int heads = 4, kv = 2, d = 32;
  const std::vector<int32_t> cu{0, 170, 300};
  const std::vector<int64_t> pos{0, 0};
  const AttentionLayout l{t, t, heads, kv, d, 0.17, true, cu, cu, pos, pos};
  const std::vector<float> q = random_vec(size_t(t * heads * d), 3), k = random_vec(size_t(t * kv * d), 4),
                           v = random_vec(size_t(t * kv * d), 5), dout = random_vec(q.size(), 6);
  auto run = [&] {
    std::vector<float> out(q.size()), lse(static_cast<size_t>(t * heads)), dq(q.size(), 0.f), dk(k.size(), 0.f), dv(v.size(), 0.f);
    attention_forward<float>(l, q.data(), k.data(), v.data(), out.data(), lse.data());
    attention_backward<float>(l, q.data(), k.data(), v.data(), out.data(), lse.data(), dout.data(), nullptr,
                              dq.data(), dk.data(), dv.data());
    std::vector<float> all = out;
    for (const auto* x : {&lse, &dq, &dk, &dv}) all.insert(all.end(), x->begin(), x->end());
    return all;
  };
  const auto [one, two] = serial_and_parallel(run);
  EXPECT_EQ(one, two);  // each task's arithmetic is the same whichever thread runs it
}

TEST(ParallelConsistency, RmsNormRowsAndColumnBlocks) {
  const int64_t n = 512, dim = 256;
  const std::vector<float> x = random_vec(size_t(n * dim), 7), w = random_vec(size_t(dim), 8),
                           dy = random_vec(size_t(n * dim), 9);
  auto run = [&] {
    std::vector<float> y(x.size()), r(static_cast<size_t>(n)), dx(x.size(), 0.f), dw(static_cast<size_t>(dim), 0.f);
    rmsnorm_forward<float>(x.data(), w.data(), y.data(), r.data(), n, dim, 1e-5);
    rmsnorm_backward<float>(x.data(), w.data(), r.data(), dy.data(), dx.data(), dw.data(), n, dim);
    y.insert(y.end(), dx.begin(), dx.end());
    y.insert(y.end(), dw.begin(), dw.end());
    return y;
  };
  const auto [one, two] = serial_and_parallel(run);
  EXPECT_EQ(one, two);
}

}  // namespace
}  // namespace hdp::kernels::cpu
