#include "ops/attention.h"

#include <cmath>

#include "kernels/cpu/attention.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/flash_attention.h"
#include "ops/check.h"
#include "ops/convert.h"
#include "ops/dispatch.h"

namespace hdp::ops {

AttentionSpec AttentionSpec::packed(const std::vector<int32_t>& cu_seqlens) {
  return AttentionSpec{cu_seqlens, cu_seqlens, {}, {}, true, 0};
}

AttentionSpec AttentionSpec::block(int32_t q_len, int64_t q_pos, int32_t k_len, int64_t k_pos, bool causal) {
  return AttentionSpec{{0, q_len}, {0, k_len}, {q_pos}, {k_pos}, causal, 0};
}

DType attention_result_dtype(DType operand) { return operand == DType::kBF16 ? DType::kF32 : operand; }

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
  if (q.dtype() != DType::kBF16) detail::expect_compute(op, "q", q);
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

bool is_bf16(const Tensor& t) { return t.dtype() == DType::kBF16; }

DType out_dtype(const Tensor& q) { return attention_result_dtype(q.dtype()); }

// Whether the bf16 operands are 16-byte aligned (CUDA's tensor-core kernel needs it).
bool aligned16(std::initializer_list<const Tensor*> operands) {
  for (const Tensor* t : operands)
    if (reinterpret_cast<uintptr_t>(t->raw()) % 16 != 0) return false;
  return true;
}

// Runs `launch(stream)` when q is on CUDA and the tensor-core kernel takes the operands; false when
// it did not run. (A generic lambda: a build without CUDA never instantiates the launch.)
template <typename Launch>
bool run_flash(const Resolved& r, const Tensor& q, std::initializer_list<const Tensor*> operands, Launch&& launch) {
  if (q.device() != Device::kCuda || !aligned16(operands)) return false;
  return detail::dispatch_device(
      q, [] { return false; },
      [&](auto stream) {
        if (!kernels::cuda::flash_attention_supports(r.layout.head_dim)) return false;
        launch(stream);
        return true;
      });
}

// The f32 operand a bf16 one stands for where no bf16 kernel runs (the CPU; CUDA's other head_dims).
Tensor widened(const Tensor& t) { return is_bf16(t) ? to_dtype(t, DType::kF32) : t; }

}  // namespace

AttentionOutput attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionSpec& spec) {
  Resolved r;
  resolve("attention_forward", q, k, v, spec, r);
  AttentionOutput o{Tensor::empty(q.shape(), out_dtype(q), q.device()),
                    Tensor::empty({q.dim(0), q.dim(1)}, out_dtype(q), q.device())};
  if (is_bf16(q)) {
    const bool ran = run_flash(r, q, {&q, &k, &v}, [&](auto stream) {
      kernels::cuda::flash_attention_forward(r.layout, q.data<uint16_t>(), k.data<uint16_t>(), v.data<uint16_t>(),
                                             o.out.data<float>(), o.lse.data<float>(), stream);
    });
    if (ran) return o;
    return attention_forward(widened(q), widened(k), widened(v), spec);
  }
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
  if (is_bf16(q)) {
    // bf16 operands (q, k, v, dout); out, lse and every gradient f32.
    detail::expect_args(kOp, q, {{"dout", dout, q.shape()}});
    const Tensor& f = dq;
    detail::expect(dq.defined() && dq.dtype() == DType::kF32, kOp, "dq is " + dq.describe() + ", expected f32");
    detail::expect_args(kOp, f,
                        {{"out", fwd.out, q.shape()}, {"lse", fwd.lse, lse_shape}, {"dq", dq, q.shape()},
                         {"dk", dk, k.shape()}, {"dv", dv, k.shape()}});
    if (dlse.defined()) detail::expect_args(kOp, f, {{"dlse", dlse, lse_shape}});
    const bool ran = run_flash(r, q, {&q, &k, &v, &dout}, [&](auto stream) {
      kernels::cuda::flash_attention_backward(r.layout, q.data<uint16_t>(), k.data<uint16_t>(), v.data<uint16_t>(),
                                              fwd.out.data<float>(), fwd.lse.data<float>(), dout.data<uint16_t>(),
                                              dlse.defined() ? dlse.data<float>() : nullptr, dq.data<float>(),
                                              dk.data<float>(), dv.data<float>(), stream);
    });
    if (ran) return;
    attention_backward(widened(q), widened(k), widened(v), spec, fwd, widened(dout), dlse, dq, dk, dv);
    return;
  }
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
