// File: mesh/step/batch_builder.h
//
// One rank's input for one micro-batch of a plan (plan.h), and the row layout ring attention
// (ring_attention.h) needs to find its shards.
//
// Rows of a rank's micro-batch, in this order:
//   1. the A block: for every sharded sequence s of the micro-batch (in MicroBatch::sequences
//      order), chunk `position` of s (mesh/plan/sharding.h: 2D chunks, member i holds chunks i and
//      2D-1-i);
//   2. the B block: chunk 2D-1-position of every sharded sequence, same order;
//   3. this rank's whole sequences: a one-rank micro-batch's sequences, or a ring member's `local`
//      sequences (in MicroBatch::local order).
// Keeping all A chunks together and all B chunks together makes each ring-attention step one
// packed kernel call per (query block, key block) pair, whatever the number of sequences.
//
// Every token carries its position in its whole sequence (RoPE), and its target is the next token
// of the whole sequence: a chunk's last token predicts the first token of the next chunk, which
// lives on another rank. A sequence's last token has no target (-1). So across all ranks of a plan
// every predicted token is counted exactly once, and the counts add up to global_targets().
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "mesh/plan/plan.h"
#include "mesh/plan/sharding.h"
#include "ops/model/llama_model.h"

namespace hdp::mesh {

// The shards of one ring micro-batch as seen from one member.
struct RingLayout {
  std::vector<std::uint32_t> ring;     // the ring's ranks, in ring order
  int position = 0;                    // this rank's index in `ring`
  std::vector<std::int64_t> lengths;   // whole lengths of the sharded sequences, in micro-batch order

  int size() const { return static_cast<int>(ring.size()); }
  // Chunk `position`, resp. 2D-1-position, of each sharded sequence as member `member` holds them.
  std::vector<TokenRange> a_chunks(int member) const;
  std::vector<TokenRange> b_chunks(int member) const;
  // Rows of member `member`'s A and B blocks (its shard is both, A first).
  std::int64_t a_rows(int member) const;
  std::int64_t b_rows(int member) const;
  std::int64_t shard_rows(int member) const { return a_rows(member) + b_rows(member); }
};

struct RankMicroBatch {
  ops::model::Batch batch;          // the rows above; cu_seqlens empty when there are shards
  RingLayout ring;                  // empty `lengths` for a micro-batch without shards
  std::vector<int32_t> local_cu;    // offsets of the whole sequences, relative to their first row
  std::int64_t counted_targets = 0; // rows with a target
  bool sharded() const { return !ring.lengths.empty(); }
};

// Builds rank `rank`'s rows of micro-batch `index` of `plan` from the token ids of every sequence
// of the global batch. InvalidArgument when the rank is not in the micro-batch or a sequence index
// is out of range.
RankMicroBatch build_rank_micro_batch(const Plan& plan, std::uint32_t index, std::uint32_t rank,
                                      std::span<const std::vector<std::int32_t>> sequences,
                                      ops::Device device = ops::Device::kCpu);

// Predicted tokens of the whole global batch: sum over sequences of max(0, length - 1).
std::int64_t global_targets(std::span<const std::vector<std::int32_t>> sequences);

}  // namespace hdp::mesh
