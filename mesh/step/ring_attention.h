// File: mesh/step/ring_attention.h
//
// Distributed causal attention for one rank's micro-batch (batch_builder.h's row layout): the
// rank's shards of long sequences attend to the keys of every member of their ring, passed around
// the ring, and its whole local sequences attend locally. An ops::AttentionExecutor, so LlamaModel
// runs it inside every layer.
//
// Forward, ring of D members, this rank at position p (ByteScale's causal balance: member i holds
// chunks i and 2D-1-i of every sharded sequence). At step t = 0..D-1 the rank holds the K/V block
// of member j = (p - t) mod D; while it computes on it, the block moves on to the right neighbour
// and the next one arrives from the left (non-blocking send/recv, so the transfer overlaps the
// compute). The work of a step, with true positions and causal masking:
//   t = 0 (own block):  both chunks against both own chunks (causal)      -> 2 chunk pairs' work
//   j < p:              A_p and B_p against A_j (all earlier: no mask)    -> 2 chunk pairs
//   j > p:              B_p against A_j and B_j (all earlier: no mask)    -> 2 chunk pairs
// (A_p against A_j or B_j for j > p, and A_p against B_j for j < p, lie in the future and are
// skipped), so every step costs every member the same. Partial results merge by LSE.
//
// Backward uses the merged output and LSE for every block. The K/V blocks travel the ring again,
// and with each block an accumulator of its dK/dV: a member adds its queries' contribution and
// passes it on one step behind the block, so after D hops every block's accumulator is back at
// its owner (D-1 K/V transfers and D dK/dV transfers per layer, data-plane.md §2). The last hop
// follows the last compute of the layer's attention, so backward() returns with it in flight and
// finish_backward() completes it: the model runs the query path's backward in between.
//
// Transfers go through the generation's one Communicator (point-to-point between the ring's
// ranks, tags from ring_tag()). Their sizes come from the RingLayout, which every member computes
// from the same plan.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "mesh/step/batch_builder.h"
#include "mesh/comm/communicator.h"
#include "ops/attention_executor.h"

namespace hdp::mesh {

// The tag of one transfer: micro-batch index (24 bits), layer (12 bits), what moves (2 bits: K, V,
// dK, dV), ring step (16 bits); below kMaxTag. InvalidArgument when a field does not fit.
Tag ring_tag(std::uint32_t micro_batch, int layer, int kind, int step);

class RingAttention final : public ops::AttentionExecutor {
 public:
  // `local_cu`: offsets of the rank's whole sequences, relative to the first row after its shard.
  // `micro_batch` goes into the tags. The communicator must outlive this object.
  RingAttention(Communicator& comm, RingLayout layout, std::vector<std::int32_t> local_cu, std::uint32_t micro_batch,
                std::chrono::milliseconds timeout);

  ops::AttentionOutput forward(int layer, const ops::Tensor& q, const ops::Tensor& k, const ops::Tensor& v) override;
  void backward(int layer, const ops::Tensor& q, const ops::Tensor& k, const ops::Tensor& v,
                const ops::AttentionOutput& fwd, const ops::Tensor& dout, const ops::Tensor& dq, const ops::Tensor& dk,
                const ops::Tensor& dv) override;
  // Waits for the last dK/dV hop of the backward() just before and adds it into its dk and dv.
  void finish_backward(int layer) override;

  // Time spent waiting for transfers after this rank's compute for a step was done: communication
  // that compute did not hide, summed over every call so far.
  double comm_wait_ms() const { return wait_ms_; }

 private:
  // A block of rows as it travels the ring: member j's K and V ([A block; B block]), or their
  // gradients' accumulators.
  struct Block {
    ops::Tensor k, v;
  };
  void check(const char* op, const ops::Tensor& q, const ops::Tensor& k) const;
  // Posts the receive of a `rows`-row block from `from` (shaped like `like` otherwise), resp. the
  // send of `block` to `to`, as two messages tagged `kind` and `kind` + 1 (K and V, or dK and dV).
  Block post_recv(int layer, int kind, int step, int from, std::int64_t rows, const ops::Tensor& like, ops::DType dtype,
                  std::vector<std::unique_ptr<Work>>& pending);
  void post_send(int layer, int kind, int step, int to, const Block& block, std::vector<std::unique_ptr<Work>>& pending);

  // The last hop of a backward(), finished by finish_backward().
  struct Deferred {
    int layer = 0;
    std::vector<std::unique_ptr<Work>> pending;
    Block own;              // arriving: this member's own block's dK/dV, summed over the ring
    Block sent;             // leaving: the accumulator of the right neighbour's block
    ops::Tensor dk, dv;     // this member's shard rows of the model's dk and dv
  };

  Communicator& comm_;
  RingLayout layout_;
  std::vector<std::int32_t> local_cu_;
  std::uint32_t micro_batch_;
  std::chrono::milliseconds timeout_;
  double wait_ms_ = 0;
  std::optional<Deferred> deferred_;
};

}  // namespace hdp::mesh
