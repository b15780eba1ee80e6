// File: mesh/plan/sharding.h
//
// How one sequence is cut over a ring of D ranks, and how few ranks it may use.
//
// A sequence is split into 2D chunks as evenly as possible (the first s mod 2D chunks one token
// longer); ring member i holds chunks i and 2D-1-i, so every member gets the same share of the causal
// mask (Megatron CP, Llama 3, ByteScale Fig. 14). A member then holds at most ceil(s/D) tokens.
#pragma once

#include <cstdint>

#include "mesh/plan/cost_model.h"

namespace hdp::mesh {

struct TokenRange {
  std::int64_t begin = 0;
  std::int64_t end = 0;  // exclusive
};

// Chunk `chunk` (0 <= chunk < 2·ring_size) of a sequence of `tokens` tokens.
TokenRange chunk_range(std::int64_t tokens, std::int64_t ring_size, std::int64_t chunk);
// Tokens held by ring member `position`: chunks position and 2·ring_size-1-position.
std::int64_t member_tokens(std::int64_t tokens, std::int64_t ring_size, std::int64_t position);

// The fewest ranks a sequence may span, and the per-rank token limit that goes with it.
struct ShardLimit {
  std::int64_t min_ranks = 1;
  double offload_ratio = 0;        // r of ByteScale Eq. 3; 0 when nothing is offloaded
  std::int64_t rank_capacity = 0;  // tokens one rank may hold for this sequence (C, or more with offload)
};

// Without offload: D(s) = ceil(s/C), any integer. With `offload` (the model must carry an
// OffloadModel), ByteScale Eq. 3: the largest ratio r that compute still hides,
// r = min(1, T_layer(s)·min(B_d2h, B_h2d) / Act(s)), is used when it is at least the ratio that saves
// a rank, r >= min(1, l·Act(C) / ((l-2)·Act(s))); a rank then holds x tokens with
// (2 + (1-r)(l-2))·Act(x) <= l·Act(C).
ShardLimit shard_limit(const CostModel& model, std::int64_t tokens, std::int64_t capacity, bool offload);

}  // namespace hdp::mesh
