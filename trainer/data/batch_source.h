// File: trainer/data/batch_source.h
//
// The deterministic source of global batches: given the data position and a token budget, the
// sequences of one training step, the same in every process whatever the world size (nothing here
// knows about ranks; every rank builds the whole global batch and takes its rows from it, see
// mesh/step/batch_builder.h).
//
// Order: epoch e visits the pieces of a PieceSource in the permutation epoch_order(seed, e, count),
// a KeyedPermutation (trainer/data/permutation.h) keyed with mix(seed, e), computed piece by piece
// and stored nowhere. The position is checkpoint::DataPosition {epoch, sample}: `sample` pieces of
// the epoch's permutation are behind it. Which permutation that is, kOrderScheme names
// (permutation.h): a checkpoint's position means the same only under the same one
// (order_fingerprint).
//
// A step takes pieces in that order while they fit in the budget; the piece that does not fit is
// cut to the budget's remaining tokens and its remainder is DROPPED (GlobalBatch::dropped_tokens):
// the piece counts as consumed. Carrying the remainder to the next step would need a third field
// in DataPosition (an offset into the piece); dropping keeps a step a function of {epoch, sample}
// alone, and it costs at most one partial piece per step. So a step holds exactly the budget, and
// a budget smaller than a piece is fine (that piece is cut).
//
// A piece the source refuses (PieceSource::read: its document is binary, vanished, unreadable) is
// passed over and counts as consumed too; the first few refusals are logged with their reason, then
// only a count at 10, 100, 1000, ... The refusal depends only on the bytes on disk, so every process
// passes over the same pieces. When a whole epoch's worth of pieces in a row is refused, next()
// throws InvalidArgument (no usable piece) instead of spinning.
//
// Epochs roll over inside a step: after the last piece of epoch e comes the first of e + 1. next()
// leaves the position at the first piece it has not consumed, with sample < count (a position at
// the very end of an epoch is rolled to {e + 1, 0}). Resuming from a saved position therefore
// continues exactly where the saved run would have: no piece skipped or repeated, given the same
// seed, source and budgets.
//
// Memory and time: nothing per piece, and no work at an epoch's start (a worker that starts,
// restarts or crosses an epoch has no shuffle to compute first). Not thread-safe (next() replaces
// the epoch's permutation when the epoch changes); one object per thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/state.h"
#include "trainer/data/permutation.h"
#include "trainer/data/piece_source.h"

namespace hdp::trainer::data {

// The order in which epoch `epoch` visits `count` pieces (>= 1): a permutation of [0, count).
KeyedPermutation epoch_order(std::uint64_t seed, std::uint64_t epoch, std::uint64_t count);

// What a checkpoint records as the fingerprint of the data its position is in: of the pieces'
// fingerprint and kOrderScheme, so that a position saved under another order is told apart as a
// position over other data is (trainer/recovery.cc: refused unless --allow-data-change).
std::string order_fingerprint(const PieceSource& pieces);

// What a checkpoint's recorded fingerprint says of `pieces`: the same data in the same order; none
// recorded (a checkpoint from before the fingerprint); the same data under the order before
// kOrderScheme (those checkpoints recorded pieces.fingerprint() alone: a Fisher-Yates shuffle of
// each epoch, so the position means other pieces here); or other data.
enum class RecordedData { kSame, kNotRecorded, kEarlierOrder, kOther };
RecordedData compare_recorded(const std::string& recorded, const PieceSource& pieces);

// One training step's sequences.
struct GlobalBatch {
  // Token ids, one vector per sequence, in the order taken: what mesh::build_rank_micro_batch reads.
  std::vector<std::vector<std::int32_t>> sequences;
  std::vector<std::uint64_t> pieces;  // pieces[i]: the piece sequences[i] is (a prefix of)
  std::int64_t tokens = 0;            // total over sequences: the budget
  std::int64_t dropped_tokens = 0;    // the cut remainder of the last piece, 0 when it fit whole
  std::uint64_t refused_pieces = 0;   // pieces passed over in this step

  // sequences[i].size() for every i: the lengths the planner needs.
  std::vector<std::int64_t> lengths() const;
};

class BatchSource {
 public:
  // Throws InvalidArgument when `pieces` is null or empty.
  BatchSource(std::shared_ptr<const PieceSource> pieces, std::uint64_t seed);

  const PieceSource& pieces() const { return *pieces_; }
  std::uint64_t seed() const { return seed_; }
  std::uint64_t pieces_per_epoch() const { return count_; }

  // The sequences of one step holding exactly `token_budget` tokens, taken from `position`, which
  // is advanced past every piece consumed. Throws InvalidArgument when token_budget < 1, when
  // position.sample > pieces_per_epoch() (a position from another corpus), or when no piece can be
  // read; `position` is left as it was when it throws.
  GlobalBatch next(checkpoint::DataPosition& position, std::int64_t token_budget);

  // Pieces refused since this object was built (for reporting; not part of the position).
  std::uint64_t refused_pieces() const { return refused_; }
  // Whether refusals are logged (default true). Every process of a job refuses the same pieces,
  // so one of them (rank 0) is enough to tell.
  void log_refusals(bool on) { log_refusals_ = on; }

 private:
  const KeyedPermutation& order(std::uint64_t epoch);

  std::shared_ptr<const PieceSource> pieces_;
  std::uint64_t seed_ = 0;
  std::uint64_t count_ = 0;
  std::uint64_t order_epoch_ = 0;
  KeyedPermutation order_;  // epoch_order(seed_, order_epoch_, count_)
  std::uint64_t refused_ = 0;
  bool log_refusals_ = true;
};

}  // namespace hdp::trainer::data
