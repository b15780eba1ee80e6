#include "mesh/step/ring_attention.h"

#include <string>

#include "common/clock.h"
#include "common/error.h"
#include "ops/add.h"

namespace hdp::mesh {
namespace {

using Clock = std::chrono::steady_clock;
using ops::AttentionOutput;
using ops::AttentionSpec;
using ops::Tensor;

// What a message carries (ring_tag's kind): a block travels as two messages, kind and kind + 1.
enum Kind { kK = 0, kV = 1, kDk = 2, kDv = 3 };

// Rows [start, start + len) of a [T, ...] tensor, sharing its storage.
Tensor rows(const Tensor& t, std::int64_t start, std::int64_t len) {
  ops::Shape shape = t.shape();
  const std::int64_t row = shape[0] > 0 ? t.numel() / shape[0] : 0;
  shape[0] = len;
  return t.view(start * row, shape);
}

AttentionOutput rows(const AttentionOutput& o, std::int64_t start, std::int64_t len) {
  return {rows(o.out, start, len), rows(o.lse, start, len)};
}

// One packed call's spec: query chunk i of every sequence against key chunk i, at their true
// positions (causal; pairs whose keys all precede their queries are then unmasked).
AttentionSpec pair_spec(const std::vector<TokenRange>& q, const std::vector<TokenRange>& k) {
  AttentionSpec spec;
  spec.cu_q.push_back(0);
  spec.cu_k.push_back(0);
  for (std::size_t i = 0; i < q.size(); ++i) {
    spec.cu_q.push_back(spec.cu_q.back() + static_cast<std::int32_t>(q[i].end - q[i].begin));
    spec.cu_k.push_back(spec.cu_k.back() + static_cast<std::int32_t>(k[i].end - k[i].begin));
    spec.q_pos.push_back(q[i].begin);
    spec.k_pos.push_back(k[i].begin);
  }
  spec.causal = true;
  return spec;
}

std::vector<TokenRange> concat(std::vector<TokenRange> a, const std::vector<TokenRange>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// acc = merge(acc, part), in place over acc's rows.
void merge_into(const AttentionOutput& acc, const AttentionOutput& part) {
  const AttentionOutput m = ops::attention_merge_forward(acc, part);
  acc.out.copy_from(m.out);
  acc.lse.copy_from(m.lse);
}

// The (query block, key block) pairs of a step t > 0 on member p holding member j's block: queries
// from p's own A or B block, keys from j's A or B block.
struct Pair {
  bool q_is_b;  // the queries are this member's B block (else its A block)
  bool k_is_b;  // the keys are member j's B block (else its A block)
};

std::vector<Pair> pairs_of_step(int p, int j) {
  if (j < p) return {{false, false}, {true, false}};
  return {{true, false}, {true, true}};  // j > p
}

}  // namespace

Tag ring_tag(std::uint32_t micro_batch, int layer, int kind, int step) {
  if (micro_batch >= (1u << 24) || layer < 0 || layer >= (1 << 12) || kind < 0 || kind > 3 || step < 0 ||
      step >= (1 << 16)) {
    throw InvalidArgument("ring_tag: micro-batch " + std::to_string(micro_batch) + ", layer " + std::to_string(layer) +
                          ", kind " + std::to_string(kind) + ", step " + std::to_string(step) +
                          " do not fit in 24/12/2/16 bits");
  }
  return (Tag{micro_batch} << 30) | (Tag(layer) << 18) | (Tag(kind) << 16) | Tag(step);
}

// A K/V (kind kK) or dK/dV (kind kDk) block: two messages, kinds `kind` and `kind` + 1.
RingAttention::Block RingAttention::post_recv(int layer, int kind, int step, int from, std::int64_t rows,
                                              const Tensor& like, ops::DType dtype,
                                              std::vector<std::unique_ptr<Work>>& pending) {
  Block block{Tensor::empty({rows, like.dim(1), like.dim(2)}, dtype, like.device()),
              Tensor::empty({rows, like.dim(1), like.dim(2)}, dtype, like.device())};
  pending.push_back(comm_.irecv(block.k, from, ring_tag(micro_batch_, layer, kind, step)));
  pending.push_back(comm_.irecv(block.v, from, ring_tag(micro_batch_, layer, kind + 1, step)));
  return block;
}

void RingAttention::post_send(int layer, int kind, int step, int to, const Block& block,
                              std::vector<std::unique_ptr<Work>>& pending) {
  pending.push_back(comm_.isend(block.k, to, ring_tag(micro_batch_, layer, kind, step)));
  pending.push_back(comm_.isend(block.v, to, ring_tag(micro_batch_, layer, kind + 1, step)));
}

RingAttention::RingAttention(Communicator& comm, RingLayout layout, std::vector<std::int32_t> local_cu,
                             std::uint32_t micro_batch, std::chrono::milliseconds timeout)
    : comm_(comm), layout_(std::move(layout)), local_cu_(std::move(local_cu)), micro_batch_(micro_batch),
      timeout_(timeout) {
  const int d = layout_.size();
  if (d < 1 || layout_.position < 0 || layout_.position >= d) {
    throw InvalidArgument("RingAttention: position " + std::to_string(layout_.position) + " in a ring of " +
                          std::to_string(d));
  }
  for (std::size_t i = 0; i < layout_.ring.size(); ++i) {
    const std::uint32_t r = layout_.ring[i];
    if (r >= static_cast<std::uint32_t>(comm_.size())) {
      throw InvalidArgument("RingAttention: ring rank " + std::to_string(r) + " is out of range for a communicator of " +
                            std::to_string(comm_.size()));
    }
    for (std::size_t k = 0; k < i; ++k) {
      if (layout_.ring[k] == r) throw InvalidArgument("RingAttention: the ring names rank " + std::to_string(r) + " twice");
    }
  }
  if (layout_.ring[static_cast<std::size_t>(layout_.position)] != static_cast<std::uint32_t>(comm_.rank())) {
    throw InvalidArgument("RingAttention: ring position " + std::to_string(layout_.position) + " is rank " +
                          std::to_string(layout_.ring[static_cast<std::size_t>(layout_.position)]) + ", not this rank " +
                          std::to_string(comm_.rank()));
  }
  if (local_cu_.empty() || local_cu_.front() != 0) {
    throw InvalidArgument("RingAttention: local offsets must start with 0");
  }
}

void RingAttention::check(const char* op, const Tensor& q, const Tensor& k) const {
  const std::int64_t expected = layout_.shard_rows(layout_.position) + local_cu_.back();
  if (q.rank() != 3 || q.dim(0) != expected || k.rank() != 3 || k.dim(0) != expected) {
    throw InvalidArgument(std::string("RingAttention::") + op + ": q " + q.describe() + " and k " + k.describe() +
                          " need " + std::to_string(expected) + " rows (shard " +
                          std::to_string(layout_.shard_rows(layout_.position)) + " + local " +
                          std::to_string(local_cu_.back()) + ")");
  }
}

AttentionOutput RingAttention::forward(int layer, const Tensor& q, const Tensor& k, const Tensor& v) {
  check("forward", q, k);
  const int d = layout_.size(), p = layout_.position;
  const std::int64_t shard = layout_.shard_rows(p), na = layout_.a_rows(p);
  const std::int64_t local = local_cu_.back();
  const ops::DType result = ops::attention_result_dtype(q.dtype());
  AttentionOutput out{Tensor::zeros(q.shape(), result, q.device()), Tensor::zeros({q.dim(0), q.dim(1)}, result, q.device())};
  const int left = static_cast<int>(layout_.ring[static_cast<std::size_t>((p + d - 1) % d)]);
  const int right = static_cast<int>(layout_.ring[static_cast<std::size_t>((p + 1) % d)]);
  const std::vector<TokenRange> a_p = layout_.a_chunks(p), b_p = layout_.b_chunks(p);
  const AttentionOutput acc = rows(out, 0, shard);

  Block cur{rows(k, 0, shard), rows(v, 0, shard)};
  for (int t = 0; t < d; ++t) {
    const int j = (p - t + d) % d;
    // Start the next block's transfer before computing on this one.
    std::vector<std::unique_ptr<Work>> pending;
    Block next;
    if (t + 1 < d) {
      next = post_recv(layer, kK, t, left, layout_.shard_rows((j + d - 1) % d), k, k.dtype(), pending);
      post_send(layer, kK, t, right, cur, pending);
    }
    if (t == 0) {
      if (local > 0) {
        const AttentionOutput o = ops::attention_forward(rows(q, shard, local), rows(k, shard, local),
                                                         rows(v, shard, local), AttentionSpec::packed(local_cu_));
        rows(out, shard, local).out.copy_from(o.out);
        rows(out, shard, local).lse.copy_from(o.lse);
      }
      if (shard > 0) {
        const std::vector<TokenRange> own = concat(a_p, b_p);
        const AttentionOutput diag = ops::attention_forward(rows(q, 0, shard), cur.k, cur.v, pair_spec(own, own));
        acc.out.copy_from(diag.out);
        acc.lse.copy_from(diag.lse);
        if (na > 0 && shard > na) {
          merge_into(rows(acc, na, shard - na),
                     ops::attention_forward(rows(q, na, shard - na), rows(cur.k, 0, na), rows(cur.v, 0, na),
                                            pair_spec(b_p, a_p)));
        }
      }
    } else {
      const std::int64_t na_j = layout_.a_rows(j), shard_j = layout_.shard_rows(j);
      for (const Pair& pair : pairs_of_step(p, j)) {
        const std::int64_t q0 = pair.q_is_b ? na : 0, q_len = pair.q_is_b ? shard - na : na;
        const std::int64_t k0 = pair.k_is_b ? na_j : 0, k_len = pair.k_is_b ? shard_j - na_j : na_j;
        if (q_len == 0 || k_len == 0) continue;
        merge_into(rows(acc, q0, q_len),
                   ops::attention_forward(rows(q, q0, q_len), rows(cur.k, k0, k_len), rows(cur.v, k0, k_len),
                                          pair_spec(pair.q_is_b ? b_p : a_p,
                                                    pair.k_is_b ? layout_.b_chunks(j) : layout_.a_chunks(j))));
      }
    }
    const auto waited = Clock::now();
    for (auto& w : pending) w->wait(timeout_);
    wait_ms_ += ms_since(waited);
    if (t + 1 < d) cur = next;
  }
  return out;
}

void RingAttention::backward(int layer, const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOutput& fwd,
                             const Tensor& dout, const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  check("backward", q, k);
  if (deferred_) {
    throw InvalidArgument("RingAttention::backward: layer " + std::to_string(deferred_->layer) +
                          "'s backward was not finished (finish_backward)");
  }
  const int d = layout_.size(), p = layout_.position;
  const std::int64_t shard = layout_.shard_rows(p), na = layout_.a_rows(p);
  const std::int64_t local = local_cu_.back();
  const int left = static_cast<int>(layout_.ring[static_cast<std::size_t>((p + d - 1) % d)]);
  const int right = static_cast<int>(layout_.ring[static_cast<std::size_t>((p + 1) % d)]);
  const std::vector<TokenRange> a_p = layout_.a_chunks(p), b_p = layout_.b_chunks(p);

  // One block's backward into dq's rows and the block's accumulators.
  auto block_backward = [&](std::int64_t q0, std::int64_t q_len, const Block& kv, const Block& acc, std::int64_t k0,
                            std::int64_t k_len, const AttentionSpec& spec) {
    if (q_len == 0 || k_len == 0) return;
    ops::attention_backward(rows(q, q0, q_len), rows(kv.k, k0, k_len), rows(kv.v, k0, k_len), spec,
                            rows(fwd, q0, q_len), rows(dout, q0, q_len), Tensor(), rows(dq, q0, q_len),
                            rows(acc.k, k0, k_len), rows(acc.v, k0, k_len));
  };

  Block cur{rows(k, 0, shard), rows(v, 0, shard)};
  // dK/dV accumulate (and travel) in the gradients' dtype: f32 also for bf16 operands.
  Block acc{Tensor::zeros(cur.k.shape(), dk.dtype(), k.device()), Tensor::zeros(cur.v.shape(), dv.dtype(), v.device())};
  for (int t = 0; t < d; ++t) {
    const int j = (p - t + d) % d, jn = (j + d - 1) % d;
    std::vector<std::unique_ptr<Work>> pending;
    Block next, next_acc;
    if (t + 1 < d) {
      next = post_recv(layer, kK, t, left, layout_.shard_rows(jn), k, k.dtype(), pending);
      post_send(layer, kK, t, right, cur, pending);
    }
    // The left neighbour's accumulator for block jn: the next step's, or (at the last step, jn = p)
    // this member's own, complete.
    if (d > 1) next_acc = post_recv(layer, kDk, t, left, layout_.shard_rows(jn), k, dk.dtype(), pending);
    if (t == 0) {
      if (local > 0) {
        ops::attention_backward(rows(q, shard, local), rows(k, shard, local), rows(v, shard, local),
                                AttentionSpec::packed(local_cu_), rows(fwd, shard, local), rows(dout, shard, local),
                                Tensor(), rows(dq, shard, local), rows(dk, shard, local), rows(dv, shard, local));
      }
      const std::vector<TokenRange> own = concat(a_p, b_p);
      block_backward(0, shard, cur, acc, 0, shard, pair_spec(own, own));
      if (na > 0 && shard > na) block_backward(na, shard - na, cur, acc, 0, na, pair_spec(b_p, a_p));
    } else {
      const std::int64_t na_j = layout_.a_rows(j), shard_j = layout_.shard_rows(j);
      for (const Pair& pair : pairs_of_step(p, j)) {
        block_backward(pair.q_is_b ? na : 0, pair.q_is_b ? shard - na : na, cur, acc, pair.k_is_b ? na_j : 0,
                       pair.k_is_b ? shard_j - na_j : na_j,
                       pair_spec(pair.q_is_b ? b_p : a_p, pair.k_is_b ? layout_.b_chunks(j) : layout_.a_chunks(j)));
      }
    }
    if (d > 1) post_send(layer, kDk, t, right, acc, pending);
    if (t + 1 == d && d > 1) {
      // The last hop: this member's own accumulator, complete, is on its way from the left. The
      // model has other work before it needs dk and dv (the query path's backward), so the wait
      // is left to finish_backward().
      deferred_ = Deferred{layer, std::move(pending), next_acc, acc, rows(dk, 0, shard), rows(dv, 0, shard)};
      return;
    }
    const auto waited = Clock::now();
    for (auto& w : pending) w->wait(timeout_);
    wait_ms_ += ms_since(waited);
    if (t + 1 < d) cur = next;
    if (d > 1) acc = next_acc;
  }
  // One member: `acc` holds its own block's dK/dV.
  if (shard > 0) {
    ops::add_(rows(dk, 0, shard), acc.k);
    ops::add_(rows(dv, 0, shard), acc.v);
  }
}

void RingAttention::finish_backward(int layer) {
  if (!deferred_) return;
  if (deferred_->layer != layer) {
    throw InvalidArgument("RingAttention::finish_backward: layer " + std::to_string(layer) + ", but layer " +
                          std::to_string(deferred_->layer) + "'s backward is the one in flight");
  }
  Deferred d = std::move(*deferred_);
  deferred_.reset();
  const auto waited = Clock::now();
  for (auto& w : d.pending) w->wait(timeout_);
  wait_ms_ += ms_since(waited);
  if (d.dk.numel() > 0) {
    ops::add_(d.dk, d.own.k);
    ops::add_(d.dv, d.own.v);
  }
}

}  // namespace hdp::mesh
