// File: ops/attention.h
//
// Packed variable-length causal attention with grouped-query heads, returning the output and the
// per-row log-sum-exp, plus the LSE merge of two partial results: the pieces ring attention is built
// from (kernels/attention_layout.h has the exact masking rule).
//
//   q [tq, n_heads, head_dim], k and v [tk, n_kv_heads, head_dim], n_heads % n_kv_heads == 0;
//   out [tq, n_heads, head_dim], lse [tq, n_heads].
// Mixed precision: q, k, v (and dout) may be bf16; out, lse and the gradients are then f32 and every
// sum accumulates in f32 (CUDA's tensor-core kernel, kernels/cuda/flash_attention.h, for head_dim
// 64 and 128; elsewhere the operands are widened to f32, exactly, and the f32 kernels run).
//
// Example (one sequence split into two key blocks, merged):
//   auto a = attention_forward(q, k0, v0, AttentionSpec::block(n, 0, n0, 0, true));
//   auto b = attention_forward(q, k1, v1, AttentionSpec::block(n, 0, n - n0, n0, true));
//   AttentionOutput full = attention_merge_forward(a, b);
#pragma once

#include <cstdint>
#include <vector>

#include "ops/tensor.h"

namespace hdp::ops {

struct AttentionSpec {
  std::vector<int32_t> cu_q;   // n_seqs + 1 query row offsets (cu_seqlens)
  std::vector<int32_t> cu_k;   // n_seqs + 1 key row offsets
  std::vector<int64_t> q_pos;  // n_seqs global positions of the first query row; empty = all 0
  std::vector<int64_t> k_pos;  // n_seqs global positions of the first key row; empty = all 0
  bool causal = true;
  double scale = 0;            // 0 means 1/sqrt(head_dim)

  // Causal self-attention over the packed sequences delimited by cu_seqlens.
  static AttentionSpec packed(const std::vector<int32_t>& cu_seqlens);
  // One sequence's query block at q_pos against its key block at k_pos.
  static AttentionSpec block(int32_t q_len, int64_t q_pos, int32_t k_len, int64_t k_pos, bool causal);
};

struct AttentionOutput {
  Tensor out;
  Tensor lse;
};

// The dtype of out, lse and the gradients for operands of `operand`: f32 for bf16, else the same.
DType attention_result_dtype(DType operand);

AttentionOutput attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionSpec& spec);

// Adds into dq, dk, dv. out/lse are what the loss saw (for ring attention, the merged result) and
// dlse the gradient reaching lse, or an undefined Tensor for none.
void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionSpec& spec,
                        const AttentionOutput& fwd, const Tensor& dout, const Tensor& dlse, const Tensor& dq,
                        const Tensor& dk, const Tensor& dv);

// lse = logaddexp(a.lse, b.lse), out = exp(a.lse - lse) a.out + exp(b.lse - lse) b.out.
AttentionOutput attention_merge_forward(const AttentionOutput& a, const AttentionOutput& b);

// Adds the gradients of a and b given those of the merged result (dlse may be undefined).
void attention_merge_backward(const AttentionOutput& a, const AttentionOutput& b, const AttentionOutput& merged,
                              const Tensor& dout, const Tensor& dlse, const AttentionOutput& da,
                              const AttentionOutput& db);

}  // namespace hdp::ops
