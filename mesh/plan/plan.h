// File: mesh/plan/plan.h
//
// The HDP step plan: for every rank an ordered list of micro-batches. A micro-batch is a set of whole
// sequences run by a ring of ranks: one rank (short sequences packed whole, no communication) or D
// ranks (each sequence cut into 2D chunks, member i holding chunks i and 2D-1-i). A member of a ring
// may also run whole short sequences of its own in the same micro-batch, filling the room its shard
// leaves (ByteScale Fig. 8: every rank holds up to C tokens per micro-batch, whatever they are).
//
// Every rank computes the identical plan from identical inputs, with no communication: the planners
// use no clocks, no unordered containers and no randomness, and break every tie by rank index.
//
// Deadlock freedom: every micro-batch has a slot; a rank runs its micro-batches in increasing slot
// order and the members of a ring share the ring's slot, so any two rings that share a rank are
// ordered the same way on every rank they share (verify_plan checks this and replays the schedule).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mesh/plan/cost_model.h"

namespace hdp::mesh {

enum class Strategy {
  kStatic,    // DP×CP mesh: CP sized for the context, every packed micro-batch over a whole CP group
  kNaive,     // ByteScale Algorithm 1: D(s) = ceil(s/C) ranks per long sequence, tokens balanced
  kBalanced,  // ByteScale Algorithm 2: time balanced with speeds, long sequences may span more ranks
};

// "static", "naive", "balanced"; throws InvalidArgument naming the unknown word.
Strategy parse_strategy(std::string_view name);
std::string_view strategy_name(Strategy strategy);

struct PlanRequest {
  std::vector<std::int64_t> lengths;  // the global batch; 0-length sequences are allowed and skipped
  std::vector<double> speeds;         // one relative speed per live rank (> 0); rank r runs cost/speed[r]
  std::int64_t capacity = 8192;       // C: tokens one rank holds in one micro-batch
  // The longest sequence the job may see; sizes the static CP group. 0 = the longest in the batch.
  std::int64_t context = 0;
  bool offload = false;               // use ByteScale Eq. 3 (needs cost.offload) to lower D(s)
  // Balanced only (δ): a short sequence joins room left in an existing micro-batch rather than open
  // a new one (paying γ) when it ends there at most δ later. Unset: 0, the earliest end; a larger δ
  // saves micro-batches but lengthened the step in every setting tried (docs/scheduler.md).
  std::optional<double> delta_ms;
  CostModel cost;
};

// A whole sequence one member of a ring runs beside its shard, without communication.
struct LocalSequence {
  std::uint32_t rank = 0;
  std::uint32_t sequence = 0;
};

struct MicroBatch {
  std::uint32_t slot = 0;
  std::vector<std::uint32_t> sequences;  // indices into PlanRequest::lengths, cut over the ring
  std::vector<std::uint32_t> ranks;      // the ring, in ring order; one rank = local, sequences whole
  std::vector<LocalSequence> local;      // rings only: members' own whole sequences
  double offload_ratio = 0;
  std::int64_t rank_capacity = 0;        // tokens a member may hold (C, or more with offload)
  double start_ms = 0;                   // simulated: when the last member is free
  double duration_ms = 0;                // simulated: cost / slowest member's speed (without `local`)
};

struct Plan {
  Strategy strategy = Strategy::kBalanced;
  std::vector<MicroBatch> micro_batches;              // in the order the planner placed them
  std::vector<std::vector<std::uint32_t>> rank_queues;  // per rank: micro-batch indices, run in this order
  std::vector<double> finish_ms;                        // simulated: when each rank finishes the step
};

// Validates the request (InvalidArgument naming the input and its limit) and plans one step.
Plan make_plan(const PlanRequest& request, Strategy strategy);

// Throws InvalidArgument when the request cannot be planned: no ranks, a speed that is not a finite
// number > 0, capacity < 1, a negative length, a batch with no tokens, a sequence longer than the
// cluster can hold (naming the sequence, its length and the limit), more than 2^32-1 sequences.
void validate_request(const PlanRequest& request);

}  // namespace hdp::mesh
