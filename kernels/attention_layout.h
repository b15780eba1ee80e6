// File: kernels/attention_layout.h
//
// How a packed, variable-length attention problem is laid out, shared by the CPU and CUDA kernels.
//
// Queries are [tq, n_heads, head_dim] rows, keys and values [tk, n_kv_heads, head_dim]; both are
// packed: sequence b owns query rows [cu_q[b], cu_q[b+1]) and key rows [cu_k[b], cu_k[b+1]) (the
// cu_seqlens convention). Query row i of sequence b sits at global position q_pos[b] + i, key row j
// at k_pos[b] + j, so a query block of a long sequence can attend to a key block held elsewhere (ring
// attention). With `causal`, a key is visible when its position is <= the query's; otherwise every key
// of the same sequence is visible. Query head h reads key/value head h / (n_heads / n_kv_heads) (GQA).
//
// A query row that sees no key gets output 0 and log-sum-exp -inf, which merges as "no contribution".
#pragma once

#include <cstdint>
#include <span>

namespace hdp::kernels {

struct AttentionLayout {
  int64_t tq = 0;               // total query rows
  int64_t tk = 0;               // total key/value rows
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  double scale = 0;             // softmax scale, usually 1/sqrt(head_dim)
  bool causal = true;
  std::span<const int32_t> cu_q;   // n_seqs + 1 offsets into the query rows (host memory)
  std::span<const int32_t> cu_k;   // n_seqs + 1 offsets into the key rows (host memory)
  std::span<const int64_t> q_pos;  // n_seqs global positions of each sequence's first query row
  std::span<const int64_t> k_pos;  // n_seqs global positions of each sequence's first key row

  int64_t n_seqs() const { return static_cast<int64_t>(cu_q.size()) - 1; }
  int group() const { return n_heads / n_kv_heads; }
};

}  // namespace hdp::kernels
