// attention_merge_forward / attention_merge_backward, declared in ops/attention.h.
#include "kernels/cpu/attention_merge.h"
#include "kernels/cuda/loss_optim.h"
#include "ops/attention.h"
#include "ops/check.h"
#include "ops/dispatch.h"

namespace hdp::ops {
namespace {

// Checks a partial result against `ref` (out [tokens, heads, dim], lse [tokens, heads]).
void check_partial(const char* op, const char* out_name, const char* lse_name, const AttentionOutput& p,
                   const AttentionOutput& ref) {
  detail::expect_args(op, ref.out, {{out_name, p.out, ref.out.shape()}, {lse_name, p.lse, ref.lse.shape()}});
}

void check_ref(const char* op, const AttentionOutput& a) {
  detail::expect_compute(op, "a.out", a.out);
  detail::expect_rank(op, "a.out", a.out, 3);
  detail::expect_args(op, a.out, {{"a.lse", a.lse, {a.out.dim(0), a.out.dim(1)}}});
}

}  // namespace

AttentionOutput attention_merge_forward(const AttentionOutput& a, const AttentionOutput& b) {
  constexpr const char* kOp = "attention_merge_forward";
  check_ref(kOp, a);
  check_partial(kOp, "b.out", "b.lse", b, a);
  const int64_t rows = a.lse.numel(), dim = a.out.dim(2);
  AttentionOutput m{Tensor::empty(a.out.shape(), a.out.dtype(), a.out.device()),
                    Tensor::empty(a.lse.shape(), a.lse.dtype(), a.lse.device())};
  detail::dispatch(
      a.out,
      [&](auto tag) {
        using T = decltype(tag);
        kernels::cpu::attention_merge_forward<T>(a.out.data<T>(), a.lse.data<T>(), b.out.data<T>(), b.lse.data<T>(),
                                                 m.out.data<T>(), m.lse.data<T>(), rows, dim);
      },
      [&](auto stream) {
        kernels::cuda::attention_merge_forward(a.out.data<float>(), a.lse.data<float>(), b.out.data<float>(),
                                               b.lse.data<float>(), m.out.data<float>(), m.lse.data<float>(), rows, dim, stream);
      });
  return m;
}

void attention_merge_backward(const AttentionOutput& a, const AttentionOutput& b, const AttentionOutput& merged,
                              const Tensor& dout, const Tensor& dlse, const AttentionOutput& da,
                              const AttentionOutput& db) {
  constexpr const char* kOp = "attention_merge_backward";
  check_ref(kOp, a);
  check_partial(kOp, "b.out", "b.lse", b, a);
  check_partial(kOp, "merged.out", "merged.lse", merged, a);
  check_partial(kOp, "da.out", "da.lse", da, a);
  check_partial(kOp, "db.out", "db.lse", db, a);
  detail::expect_args(kOp, a.out, {{"dout", dout, a.out.shape()}});
  if (dlse.defined()) detail::expect_args(kOp, a.out, {{"dlse", dlse, a.lse.shape()}});
  const int64_t rows = a.lse.numel(), dim = a.out.dim(2);
  detail::dispatch(
      a.out,
      [&](auto tag) {
        using T = decltype(tag);
        kernels::cpu::attention_merge_backward<T>(a.out.data<T>(), a.lse.data<T>(), b.out.data<T>(), b.lse.data<T>(),
                                                  merged.out.data<T>(), dout.data<T>(),
                                                  dlse.defined() ? dlse.data<T>() : nullptr, da.out.data<T>(),
                                                  da.lse.data<T>(), db.out.data<T>(), db.lse.data<T>(), rows, dim);
      },
      [&](auto stream) {
        kernels::cuda::attention_merge_backward(a.out.data<float>(), a.lse.data<float>(), b.out.data<float>(),
                                                b.lse.data<float>(), merged.out.data<float>(), dout.data<float>(),
                                                dlse.defined() ? dlse.data<float>() : nullptr, da.out.data<float>(),
                                                da.lse.data<float>(), db.out.data<float>(), db.lse.data<float>(), rows,
                                                dim, stream);
      });
}

}  // namespace hdp::ops
