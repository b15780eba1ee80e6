// File: mesh/step/reshard.h
//
// Recovery without lost steps: at the start of every generation the ranks rebuild the new world's
// ZeRO-1 layout (mesh/step/zero.h) from the training state that survives in their memory, by
// point-to-point transfers, instead of reading a checkpoint (docs/data-plane.md, "Recovery from
// memory").
//
// What a rank can offer (HeldState): the layout its shards belong to (the generation that built it
// and its world size W), the step it last completed, whether its full parameter buffer holds one
// step whole, the data positions it knows, and every (shard, step) pair it holds
// (ZeroOptimizer::versions: its own shard and the copies it keeps, each at its current step and,
// with keep_previous, the step before).
//
// The commit rule (plan_reshard), a pure function of every rank's HeldState, so every rank
// computes the same plan with no further message:
//   - in each layout, its complete step is the largest step at which every one of its W shards is
//     held by some rank of the new generation (and whose data position some rank knows). The
//     layout complete at the largest step T wins (ties: the newest; generation numbers start again
//     after a store is emptied, so they cannot order layouts alone); none: `possible` is false and
//     `why` names a shard whose copies are all lost (the caller falls back to the checkpoint).
//   - Why T is consistent: a step changes a shard's triple only in its update, after the
//     reduce-scatter, and every holder of a triple keeps the one before (keep_previous), so a
//     failure anywhere in step S + 1 leaves every surviving triple at S or S + 1 with S still
//     available. T = S + 1 (roll forward) when every shard's update reached a survivor, else S
//     (roll back): the in-flight step is then redone on the new mesh. A rank completes step S + 1
//     only after the all-gather received every rank's updated block, which every rank sends only
//     after it updated its own shard and its copies: so if any rank completed S + 1, every shard's
//     S + 1 triple was on two ranks of different nodes, and a one-node failure leaves T = S + 1:
//     the step counter never goes back.
//   - the source of shard k is its old owner when that rank is in the new generation and holds
//     (k, T), else the lowest new rank that does.
//   - every new rank whose parameter buffer is not whole at T (a joiner, a rank that was in the
//     update or the all-gather of the failed step, a rank that rolls forward) receives every range
//     it is not the source of; the others receive none.
//   - the new rank j's shard [offset_j, offset_j + count_j) is cut along the old shards' ranges,
//     each piece sent by its shard's source.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "mesh/comm/communicator.h"
#include "mesh/step/zero.h"

namespace hdp::mesh {

struct DataMark {
  std::int64_t step = -1;  // -1: unused
  std::uint64_t epoch = 0, sample = 0;
};

struct HeldState {
  std::int64_t layout = -1;       // the generation that built the layout of its shards; -1: none
  int old_world = 0;              // that layout's world size
  int old_rank = -1;              // this rank's rank in it
  std::int64_t completed = -1;    // the last step it completed; -1: none
  std::int64_t params_step = -1;  // the step its full parameter buffer holds whole; -1: mixed or none
  std::array<DataMark, 3> positions{};
  // The caller's digests of what every rank must share (the trainer's: trainer/job_identity.h),
  // carried by the all-gather and compared by the caller, not by plan_reshard.
  std::array<std::uint64_t, 4> job{};
  struct Held {
    int owner = 0;
    std::int64_t step = 0;
  };
  std::vector<Held> held;
};

struct ReshardPlan {
  bool possible = false;
  std::string why;         // when not possible
  std::int64_t layout = -1;
  int old_world = 0;
  std::int64_t step = 0;   // T
  DataMark position;       // the data position after step T
  std::int64_t furthest = -1;  // the furthest step any rank completed (lost steps: furthest - step)
  std::vector<int> source;            // by old shard: the new rank that provides it at T
  std::vector<bool> receives_params;  // by new rank
  struct Piece {
    int shard = 0, from = 0, to = 0;
    std::int64_t begin = 0, end = 0;  // a flat range inside both the old shard and the new one
  };
  std::vector<Piece> pieces;  // the new shards' optimizer state, by new rank then old shard
};

// `ranks[r]`: new rank r's state; `n`: the flat buffer's size. Throws InvalidArgument for a state
// that cannot be (a shard outside its layout's world).
ReshardPlan plan_reshard(const std::vector<HeldState>& ranks, std::int64_t n);

// Every rank's HeldState, by rank (two all-gathers: the fixed part, with the number of pairs and
// the job's digests, then the pairs).
std::vector<HeldState> exchange_states(const HeldState& mine, Communicator& comm, std::chrono::milliseconds timeout);

struct ReshardTraffic {
  std::uint64_t bytes_sent = 0, bytes_received = 0;
};

// Carries out `plan` on this rank: `mine` are its versions (ZeroOptimizer::versions; empty for a
// rank with no state), `params` the full flat parameter buffer (filled at T where the plan says),
// `next` the new layout's optimizer of this rank (its exp_avg and exp_avg_sq are filled, its step
// count set to T). Every transfer waits at most `timeout`; PeerLost / TimeoutError as the
// communicator throws them.
ReshardTraffic execute_reshard(const ReshardPlan& plan, Communicator& comm, const std::vector<ZeroOptimizer::Version>& mine,
                               const ops::Tensor& params, ZeroOptimizer& next, std::chrono::milliseconds timeout);

}  // namespace hdp::mesh
