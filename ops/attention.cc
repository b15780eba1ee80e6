#include "ops/attention.h"

#include <cmath>

#include "kernels/cpu/attention.h"
#include "kernels/cuda/attention.h"
#include "ops/check.h"
#include "ops/dispatch.h"

namespace hdp::ops {

AttentionSpec AttentionSpec::packed(const std::vector<int32_t>& cu_seqlens) {
  return AttentionSpec{cu_seqlens, cu_seqlens, {}, {}, true, 0};
}

AttentionSpec AttentionSpec::block(int32_t q_len, int64_t q_pos, int32_t k_len, int64_t k_pos, bool causal) {
  return AttentionSpec{{0, q_len}, {0, k_len}, {q_pos}, {k_pos}, causal, 0};
}

namespace {

// The spec checked against the tensors, with defaults filled in; owns the arrays the layout spans.
struct Resolved {
  AttentionSpec spec;
  kernels::AttentionLayout layout;
};

std::string spec_string(const AttentionSpec& s) {
  std::vector<int64_t> cq(s.cu_q.begin(), s.cu_q.end()), ck(s.cu_k.begin(), s.cu_k.end());
  return "cu_q " + shape_string(cq) + " cu_k " + shape_string(ck);
}

void check_offsets(const char* op, const std::vector<int32_t>& cu, int64_t rows, const AttentionSpec& spec) {
  detail::expect(cu.size() >= 2 && cu.front() == 0 && cu.back() == rows, op,
                 spec_string(spec) + " must start at 0 and end at the row count " + std::to_string(rows));
  for (size_t i = 1; i < cu.size(); ++i)
    detail::expect(cu[i] >= cu[i - 1], op, spec_string(spec) + " offsets must not decrease");
}

// `r` is filled in place: the layout points into r.spec, so a Resolved is never copied or moved.
void resolve(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const AttentionSpec& spec,
             Resolved& r) {
  detail::expect_compute(op, "q", q);
  detail::expect_rank(op, "q", q, 3);
  detail::expect_rank(op, "k", k, 3);
  detail::expect_like(op, "k", k, q);
  detail::expect_args(op, q, {{"v", v, k.shape()}});
  detail::expect(k.dim(2) == q.dim(2) && k.dim(1) > 0 && q.dim(1) % k.dim(1) == 0, op,
                 "q " + q.describe() + " and k " + k.describe() +
                     " need equal head_dim and n_heads divisible by n_kv_heads");
  detail::expect(spec.cu_q.size() == spec.cu_k.size(), op, spec_string(spec) + " differ in sequence count");
  check_offsets(op, spec.cu_q, q.dim(0), spec);
  check_offsets(op, spec.cu_k, k.dim(0), spec);
  const size_t n_seqs = spec.cu_q.size() - 1;
  r.spec = spec;
  for (std::vector<int64_t>* pos : {&r.spec.q_pos, &r.spec.k_pos}) {
    if (pos->empty()) pos->assign(n_seqs, 0);
    detail::expect(pos->size() == n_seqs, op,
                   "position offsets need one entry per sequence (" + std::to_string(n_seqs) + ")");
  }
  kernels::AttentionLayout& l = r.layout;
  l.tq = q.dim(0);
  l.tk = k.dim(0);
  l.n_heads = static_cast<int>(q.dim(1));
  l.n_kv_heads = static_cast<int>(k.dim(1));
  l.head_dim = static_cast<int>(q.dim(2));
  l.scale = spec.scale != 0 ? spec.scale : 1.0 / std::sqrt(double(l.head_dim));
  l.causal = spec.causal;
  l.cu_q = r.spec.cu_q;
  l.cu_k = r.spec.cu_k;
  l.q_pos = r.spec.q_pos;
  l.k_pos = r.spec.k_pos;
}

}  // namespace

AttentionOutput attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionSpec& spec) {
  Resolved r;
  resolve("attention_forward", q, k, v, spec, r);
  AttentionOutput o{Tensor::empty(q.shape(), q.dtype(), q.device()),
                    Tensor::empty({q.dim(0), q.dim(1)}, q.dtype(), q.device())};
  detail::dispatch(
      q,
      [&](auto tag) {
        using T = decltype(tag);
        kernels::cpu::attention_forward<T>(r.layout, q.data<T>(), k.data<T>(), v.data<T>(), o.out.data<T>(),
                                           o.lse.data<T>());
      },
      [&](auto stream) {
        kernels::cuda::attention_forward(r.layout, q.data<float>(), k.data<float>(), v.data<float>(), o.out.data<float>(),
                                         o.lse.data<float>(), stream);
      });
  return o;
}

void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionSpec& spec,
                        const AttentionOutput& fwd, const Tensor& dout, const Tensor& dlse, const Tensor& dq,
                        const Tensor& dk, const Tensor& dv) {
  constexpr const char* kOp = "attention_backward";
  Resolved r;
  resolve(kOp, q, k, v, spec, r);
  const Shape lse_shape{q.dim(0), q.dim(1)};
  detail::expect_args(kOp, q,
                      {{"out", fwd.out, q.shape()}, {"lse", fwd.lse, lse_shape}, {"dout", dout, q.shape()},
                       {"dq", dq, q.shape()}, {"dk", dk, k.shape()}, {"dv", dv, k.shape()}});
  if (dlse.defined()) detail::expect_args(kOp, q, {{"dlse", dlse, lse_shape}});
  detail::dispatch(
      q,
      [&](auto tag) {
        using T = decltype(tag);
        kernels::cpu::attention_backward<T>(r.layout, q.data<T>(), k.data<T>(), v.data<T>(), fwd.out.data<T>(),
                                            fwd.lse.data<T>(), dout.data<T>(), dlse.defined() ? dlse.data<T>() : nullptr,
                                            dq.data<T>(), dk.data<T>(), dv.data<T>());
      },
      [&](auto stream) {
        kernels::cuda::attention_backward(r.layout, q.data<float>(), k.data<float>(), v.data<float>(),
                                          fwd.out.data<float>(), fwd.lse.data<float>(), dout.data<float>(),
                                          dlse.defined() ? dlse.data<float>() : nullptr, dq.data<float>(),
                                          dk.data<float>(), dv.data<float>(), stream);
      });
}

}  // namespace hdp::ops
