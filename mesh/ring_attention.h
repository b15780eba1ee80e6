// File: mesh/ring_attention.h
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
// its owner (D-1 K/V transfers and D dK/dV transfers per layer, data-plane.md §2).
//
// Transfers go through the generation's one Communicator (point-to-point between the ring's
// ranks, tags from ring_tag()). Their sizes come from the RingLayout, which every member computes
// from the same plan.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "mesh/batch_builder.h"
#include "mesh/communicator.h"
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

  // Time spent waiting for transfers after this rank's compute for a step was done: communication
  // that compute did not hide, summed over every call so far.
  double comm_wait_ms() const { return wait_ms_; }

 private:
  void check(const char* op, const ops::Tensor& q, const ops::Tensor& k) const;

  Communicator& comm_;
  RingLayout layout_;
  std::vector<std::int32_t> local_cu_;
  std::uint32_t micro_batch_;
  std::chrono::milliseconds timeout_;
  double wait_ms_ = 0;
};

}  // namespace hdp::mesh
