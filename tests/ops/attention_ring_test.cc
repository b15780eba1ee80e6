// The identities ring attention is built on, in f32: packing documents changes nothing, and a
// sequence cut into k = 1..8 query and key/value chunks, attended chunk against chunk with position
// offsets and merged by LSE, equals the unsplit attention, forward and backward; with GQA
// n_kv_heads in {1, 2, n_heads}. Bound: 1e-5 relative (norm-wise over the tensor); the only
// difference between the two computations is f32 summation order (~1e-7 per sum).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "ops/attention.h"
#include "tests/ops/grad_check.h"

namespace hdp::ops::testing {
namespace {

constexpr int kHeads = 4;
constexpr int kHeadDim = 8;
constexpr double kTol = 1e-5;

// Rows [start, start + len) of a [T, heads, dim] or [T, heads] tensor, sharing storage.
Tensor rows(const Tensor& t, int64_t start, int64_t len) {
  Shape s = t.shape();
  const int64_t row = t.numel() / s[0];
  s[0] = len;
  return t.view(start * row, s);
}

Tensor zeros_like(const Tensor& t) { return Tensor::zeros(t.shape(), t.dtype()); }

struct Qkv {
  Tensor q, k, v, dout;
};

Qkv random_qkv(int64_t n, int kv_heads, uint64_t seed) {
  return {random_tensor({n, kHeads, kHeadDim}, DType::kF32, seed),
          random_tensor({n, kv_heads, kHeadDim}, DType::kF32, seed + 1),
          random_tensor({n, kv_heads, kHeadDim}, DType::kF32, seed + 2),
          random_tensor({n, kHeads, kHeadDim}, DType::kF32, seed + 3)};
}

class AttentionRing : public ::testing::TestWithParam<int> {};  // parameter: n_kv_heads

TEST_P(AttentionRing, PackedEqualsEachDocumentAlone) {
  const std::vector<int32_t> cu{0, 13, 14, 54, 61};  // 13, 1, 40 and 7 tokens
  const Qkv x = random_qkv(cu.back(), GetParam(), 100);
  const AttentionSpec packed = AttentionSpec::packed(cu);
  const AttentionOutput all = attention_forward(x.q, x.k, x.v, packed);
  Tensor dq = zeros_like(x.q), dk = zeros_like(x.k), dv = zeros_like(x.v);
  attention_backward(x.q, x.k, x.v, packed, all, x.dout, Tensor(), dq, dk, dv);
  for (size_t b = 0; b + 1 < cu.size(); ++b) {
    const int64_t s = cu[b], n = cu[b + 1] - cu[b];
    const AttentionSpec alone = AttentionSpec::packed({0, static_cast<int32_t>(n)});
    const Tensor q = rows(x.q, s, n), k = rows(x.k, s, n), v = rows(x.v, s, n);
    const AttentionOutput one = attention_forward(q, k, v, alone);
    Tensor dq1 = zeros_like(q), dk1 = zeros_like(k), dv1 = zeros_like(v);
    attention_backward(q, k, v, alone, one, rows(x.dout, s, n), Tensor(), dq1, dk1, dv1);
    EXPECT_LE(rel_error(one.out, rows(all.out, s, n)), kTol) << "doc " << b;
    EXPECT_LE(rel_error(one.lse, rows(all.lse, s, n)), kTol) << "doc " << b;
    EXPECT_LE(rel_error(dq1, rows(dq, s, n)), kTol) << "doc " << b;
    EXPECT_LE(rel_error(dk1, rows(dk, s, n)), kTol) << "doc " << b;
    EXPECT_LE(rel_error(dv1, rows(dv, s, n)), kTol) << "doc " << b;
  }
}

// Chunk boundaries 0 = c_0 < ... < c_k = n at random points.
std::vector<int64_t> random_cuts(int64_t n, int k, std::mt19937& rng) {
  std::vector<int64_t> inner(static_cast<size_t>(n - 1));
  for (int64_t i = 0; i < n - 1; ++i) inner[static_cast<size_t>(i)] = i + 1;
  std::shuffle(inner.begin(), inner.end(), rng);
  std::vector<int64_t> cuts(inner.begin(), inner.begin() + (k - 1));
  cuts.push_back(0);
  cuts.push_back(n);
  std::sort(cuts.begin(), cuts.end());
  return cuts;
}

AttentionSpec chunk_spec(const std::vector<int64_t>& c, size_t a, size_t b) {
  return AttentionSpec::block(static_cast<int32_t>(c[a + 1] - c[a]), c[a], static_cast<int32_t>(c[b + 1] - c[b]), c[b],
                              true);
}

TEST_P(AttentionRing, ChunkedAndMergedEqualsUnsplit) {
  constexpr int64_t kLen = 45;
  const Qkv x = random_qkv(kLen, GetParam(), 200);
  const AttentionSpec whole = AttentionSpec::packed({0, kLen});
  const AttentionOutput ref = attention_forward(x.q, x.k, x.v, whole);
  Tensor dq_ref = zeros_like(x.q), dk_ref = zeros_like(x.k), dv_ref = zeros_like(x.v);
  attention_backward(x.q, x.k, x.v, whole, ref, x.dout, Tensor(), dq_ref, dk_ref, dv_ref);

  std::mt19937 rng(7);
  for (int k = 1; k <= 8; ++k) {
    const std::vector<int64_t> c = random_cuts(kLen, k, rng);
    auto q_of = [&](size_t a) { return rows(x.q, c[a], c[a + 1] - c[a]); };
    auto k_of = [&](size_t b) { return rows(x.k, c[b], c[b + 1] - c[b]); };
    auto v_of = [&](size_t b) { return rows(x.v, c[b], c[b + 1] - c[b]); };
    Tensor dq = zeros_like(x.q), dk = zeros_like(x.k), dv = zeros_like(x.v);      // ring-style backward
    Tensor dq2 = zeros_like(x.q), dk2 = zeros_like(x.k), dv2 = zeros_like(x.v);   // through the merges
    for (size_t a = 0; a + 1 < c.size(); ++a) {
      // Forward: query chunk a against every key chunk, merged left to right.
      std::vector<AttentionOutput> part, acc;
      for (size_t b = 0; b + 1 < c.size(); ++b) {
        part.push_back(attention_forward(q_of(a), k_of(b), v_of(b), chunk_spec(c, a, b)));
        acc.push_back(b == 0 ? part[0] : attention_merge_forward(acc.back(), part.back()));
      }
      const AttentionOutput& merged = acc.back();
      const int64_t len = c[a + 1] - c[a];
      EXPECT_LE(rel_error(merged.out, rows(ref.out, c[a], len)), kTol) << "k=" << k << " chunk " << a;
      EXPECT_LE(rel_error(merged.lse, rows(ref.lse, c[a], len)), kTol) << "k=" << k << " chunk " << a;

      // Ring-style backward: every block uses the merged output and LSE, no dlse.
      const Tensor dout = rows(x.dout, c[a], len);
      for (size_t b = 0; b + 1 < c.size(); ++b)
        attention_backward(q_of(a), k_of(b), v_of(b), chunk_spec(c, a, b), merged, dout, Tensor(),
                           rows(dq, c[a], len), rows(dk, c[b], c[b + 1] - c[b]), rows(dv, c[b], c[b + 1] - c[b]));

      // Chain rule through the merges: each block gets its own (dout, dlse).
      Tensor d_out = dout.clone(), d_lse = zeros_like(merged.lse);
      for (size_t b = part.size(); b-- > 0;) {
        Tensor dpo = zeros_like(d_out), dpl = zeros_like(d_lse);
        if (b > 0) {
          Tensor dao = zeros_like(d_out), dal = zeros_like(d_lse);
          attention_merge_backward(acc[b - 1], part[b], acc[b], d_out, d_lse, {dao, dal}, {dpo, dpl});
          attention_backward(q_of(a), k_of(b), v_of(b), chunk_spec(c, a, b), part[b], dpo, dpl, rows(dq2, c[a], len),
                             rows(dk2, c[b], c[b + 1] - c[b]), rows(dv2, c[b], c[b + 1] - c[b]));
          d_out = dao;
          d_lse = dal;
        } else {
          attention_backward(q_of(a), k_of(0), v_of(0), chunk_spec(c, a, 0), part[0], d_out, d_lse,
                             rows(dq2, c[a], len), rows(dk2, 0, c[1]), rows(dv2, 0, c[1]));
        }
      }
    }
    EXPECT_LE(rel_error(dq, dq_ref), kTol) << "ring-style dq k=" << k;
    EXPECT_LE(rel_error(dk, dk_ref), kTol) << "ring-style dk k=" << k;
    EXPECT_LE(rel_error(dv, dv_ref), kTol) << "ring-style dv k=" << k;
    EXPECT_LE(rel_error(dq2, dq_ref), kTol) << "chained dq k=" << k;
    EXPECT_LE(rel_error(dk2, dk_ref), kTol) << "chained dk k=" << k;
    EXPECT_LE(rel_error(dv2, dv_ref), kTol) << "chained dv k=" << k;
  }
}

INSTANTIATE_TEST_SUITE_P(KvHeads, AttentionRing, ::testing::Values(1, 2, kHeads));

}  // namespace
}  // namespace hdp::ops::testing
