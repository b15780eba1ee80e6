// Distributed ring attention (mesh/step/ring_attention.h) over D = 1, 2, 3, 4, 5, 8 ranks as threads
// with real TCP connections on loopback, against single-rank attention over the whole sequences,
// forward (output and LSE) and backward (dq, dk, dv). Each micro-batch holds three sharded
// sequences (one not a multiple of 2D, one shorter than 2D, one a multiple of 4D) and whole local
// sequences on two members; the ring's order is a permutation of the ranks, not 0..D-1; GQA with
// 4 query heads over 2 key/value heads. Bound: 1e-5 relative (norm-wise over each tensor, f32), as
// for the one-process split/merge identities (tests/ops/attention_ring_test.cc): the two sides
// differ only in f32 summation order. In f64 the bound is 1e-12.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>

#include "common/error.h"
#include "mesh/comm/communicator_factory.h"
#include "mesh/step/ring_attention.h"
#include "tests/ops/grad_check.h"

namespace hdp::mesh {
namespace {

using namespace std::chrono_literals;
using ops::AttentionOutput;
using ops::DType;
using ops::Tensor;
using ops::testing::random_tensor;
using ops::testing::rel_error;

constexpr int kHeads = 4, kKvHeads = 2, kHeadDim = 8;

struct Row {
  std::size_t seq;
  std::int64_t token;
};

// Rows [start, start + len) of a [T, ...] tensor, sharing storage.
Tensor rows(const Tensor& t, std::int64_t start, std::int64_t len) {
  ops::Shape shape = t.shape();
  const std::int64_t row = t.numel() / shape[0];
  shape[0] = len;
  return t.view(start * row, shape);
}

// Copies the listed rows of `src` (indexed by global row) into a new tensor, or back.
Tensor gather(const Tensor& src, const std::vector<std::int64_t>& idx) {
  ops::Shape shape = src.shape();
  shape[0] = static_cast<std::int64_t>(idx.size());
  Tensor out = Tensor::zeros(shape, src.dtype());
  for (std::size_t i = 0; i < idx.size(); ++i) rows(out, static_cast<std::int64_t>(i), 1).copy_from(rows(src, idx[i], 1));
  return out;
}
void scatter(const Tensor& dst, const Tensor& src, const std::vector<std::int64_t>& idx) {
  for (std::size_t i = 0; i < idx.size(); ++i) rows(dst, idx[i], 1).copy_from(rows(src, static_cast<std::int64_t>(i), 1));
}

struct Case {
  int d;
  DType dtype;
};

class RingAttentionTest : public ::testing::TestWithParam<Case> {};

TEST_P(RingAttentionTest, EqualsSingleRankAttentionForwardAndBackward) {
  const auto [d, dtype] = GetParam();
  const double tol = dtype == DType::kF32 ? 1e-5 : 1e-12;
  // The sequences: three sharded over the ring, then whole ones on members 0 and d-1.
  const std::vector<std::int64_t> sharded{53, 2 * d - 1, 4 * d};
  std::vector<std::vector<std::int64_t>> local_lengths(static_cast<std::size_t>(d));
  local_lengths[0] = {7, 12};
  local_lengths[static_cast<std::size_t>(d - 1)].push_back(5);
  std::vector<std::int64_t> all = sharded;
  std::vector<std::vector<std::size_t>> local_seqs(static_cast<std::size_t>(d));
  for (int m = 0; m < d; ++m) {
    for (std::int64_t len : local_lengths[static_cast<std::size_t>(m)]) {
      local_seqs[static_cast<std::size_t>(m)].push_back(all.size());
      all.push_back(len);
    }
  }
  std::vector<std::int64_t> start{0};
  for (std::int64_t len : all) start.push_back(start.back() + len);
  const std::int64_t total = start.back();

  // The reference: every sequence whole, packed, on one rank.
  const Tensor q = random_tensor({total, kHeads, kHeadDim}, dtype, 11);
  const Tensor k = random_tensor({total, kKvHeads, kHeadDim}, dtype, 12);
  const Tensor v = random_tensor({total, kKvHeads, kHeadDim}, dtype, 13);
  const Tensor dout = random_tensor({total, kHeads, kHeadDim}, dtype, 14);
  std::vector<std::int32_t> cu(start.begin(), start.end());
  const ops::AttentionSpec packed = ops::AttentionSpec::packed(cu);
  const AttentionOutput ref = ops::attention_forward(q, k, v, packed);
  Tensor dq_ref = Tensor::zeros(q.shape(), dtype), dk_ref = Tensor::zeros(k.shape(), dtype),
         dv_ref = Tensor::zeros(v.shape(), dtype);
  ops::attention_backward(q, k, v, packed, ref, dout, Tensor(), dq_ref, dk_ref, dv_ref);

  // The ring: ranks in a permuted order (rank ring[p] = (d - p) mod d sits at position p).
  std::vector<std::uint32_t> ring(static_cast<std::size_t>(d));
  for (int p = 0; p < d; ++p) ring[static_cast<std::size_t>(p)] = static_cast<std::uint32_t>((d - p) % d);

  Tensor out = Tensor::zeros(ref.out.shape(), dtype), lse = Tensor::zeros(ref.lse.shape(), dtype);
  Tensor dq = Tensor::zeros(q.shape(), dtype), dk = Tensor::zeros(k.shape(), dtype), dv = Tensor::zeros(v.shape(), dtype);
  auto comms = connect_local(d, 20s);
  std::vector<std::string> errors(static_cast<std::size_t>(d));
  std::vector<std::thread> threads;
  std::mutex write;
  for (int p = 0; p < d; ++p) {
    threads.emplace_back([&, p] {
      try {
        const std::uint32_t rank = ring[static_cast<std::size_t>(p)];
        RingLayout layout{ring, p, sharded};
        // This member's rows in batch_builder.h's order: A chunks, B chunks, local sequences.
        std::vector<std::int64_t> idx;
        const auto a = layout.a_chunks(p), b = layout.b_chunks(p);
        for (const auto* part : {&a, &b}) {
          for (std::size_t s = 0; s < sharded.size(); ++s) {
            for (std::int64_t i = (*part)[s].begin; i < (*part)[s].end; ++i) idx.push_back(start[s] + i);
          }
        }
        std::vector<std::int32_t> local_cu{0};
        for (std::size_t s : local_seqs[static_cast<std::size_t>(p)]) {
          for (std::int64_t i = 0; i < all[s]; ++i) idx.push_back(start[s] + i);
          local_cu.push_back(local_cu.back() + static_cast<std::int32_t>(all[s]));
        }
        const Tensor ql = gather(q, idx), kl = gather(k, idx), vl = gather(v, idx), dl = gather(dout, idx);
        RingAttention attention(*comms[rank], layout, local_cu, /*micro_batch=*/7, 20s);
        const AttentionOutput o = attention.forward(/*layer=*/3, ql, kl, vl);
        Tensor dql = Tensor::zeros(ql.shape(), dtype), dkl = Tensor::zeros(kl.shape(), dtype),
               dvl = Tensor::zeros(vl.shape(), dtype);
        attention.backward(3, ql, kl, vl, o, dl, dql, dkl, dvl);
        attention.finish_backward(3);
        std::lock_guard lock(write);
        scatter(out, o.out, idx);
        scatter(lse, o.lse, idx);
        scatter(dq, dql, idx);
        scatter(dk, dkl, idx);
        scatter(dv, dvl, idx);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(p)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int p = 0; p < d; ++p) EXPECT_EQ(errors[static_cast<std::size_t>(p)], "") << "member " << p;
  EXPECT_LE(rel_error(out, ref.out), tol);
  EXPECT_LE(rel_error(lse, ref.lse), tol);
  EXPECT_LE(rel_error(dq, dq_ref), tol);
  EXPECT_LE(rel_error(dk, dk_ref), tol);
  EXPECT_LE(rel_error(dv, dv_ref), tol);
}

INSTANTIATE_TEST_SUITE_P(Ranks, RingAttentionTest,
                         ::testing::Values(Case{1, DType::kF32}, Case{2, DType::kF32}, Case{3, DType::kF32},
                                           Case{4, DType::kF32}, Case{5, DType::kF32}, Case{8, DType::kF32},
                                           Case{3, DType::kF64}, Case{4, DType::kF64}),
                         [](const auto& info) {
                           return "D" + std::to_string(info.param.d) +
                                  (info.param.dtype == DType::kF32 ? "_f32" : "_f64");
                         });

TEST(RingTag, FieldsThatDoNotFitAreRejected) {
  EXPECT_LT(ring_tag((1u << 24) - 1, 4095, 3, 65535), kMaxTag);
  EXPECT_NE(ring_tag(1, 0, 0, 0), ring_tag(0, 1, 0, 0));
  EXPECT_NE(ring_tag(0, 0, 1, 0), ring_tag(0, 0, 0, 1));
  EXPECT_THROW(ring_tag(1u << 24, 0, 0, 0), InvalidArgument);
  EXPECT_THROW(ring_tag(0, 4096, 0, 0), InvalidArgument);
  EXPECT_THROW(ring_tag(0, 0, 4, 0), InvalidArgument);
  EXPECT_THROW(ring_tag(0, 0, 0, 1 << 16), InvalidArgument);
}

}  // namespace
}  // namespace hdp::mesh
