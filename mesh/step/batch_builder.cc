#include "mesh/step/batch_builder.h"

#include <algorithm>
#include <string>

#include "common/error.h"

namespace hdp::mesh {
namespace {

std::vector<TokenRange> chunks_of(const RingLayout& l, std::int64_t chunk) {
  std::vector<TokenRange> out;
  out.reserve(l.lengths.size());
  for (std::int64_t len : l.lengths) out.push_back(chunk_range(len, l.size(), chunk));
  return out;
}

std::int64_t rows_of(const std::vector<TokenRange>& chunks) {
  std::int64_t n = 0;
  for (const TokenRange& c : chunks) n += c.end - c.begin;
  return n;
}

// Appends tokens [begin, end) of `seq` with their positions and next-token targets.
struct RowWriter {
  std::vector<std::int32_t> tokens, targets;
  std::vector<std::int64_t> positions;
  std::int64_t counted = 0;

  void append(const std::vector<std::int32_t>& seq, std::int64_t begin, std::int64_t end) {
    const auto n = static_cast<std::int64_t>(seq.size());
    for (std::int64_t i = begin; i < end; ++i) {
      tokens.push_back(seq[static_cast<std::size_t>(i)]);
      const bool has_target = i + 1 < n;
      targets.push_back(has_target ? seq[static_cast<std::size_t>(i + 1)] : -1);
      positions.push_back(i);
      counted += has_target ? 1 : 0;
    }
  }
};

}  // namespace

std::vector<TokenRange> RingLayout::a_chunks(int member) const { return chunks_of(*this, member); }
std::vector<TokenRange> RingLayout::b_chunks(int member) const { return chunks_of(*this, 2 * size() - 1 - member); }
std::int64_t RingLayout::a_rows(int member) const { return rows_of(a_chunks(member)); }
std::int64_t RingLayout::b_rows(int member) const { return rows_of(b_chunks(member)); }

RankMicroBatch build_rank_micro_batch(const Plan& plan, std::uint32_t index, std::uint32_t rank,
                                      std::span<const std::vector<std::int32_t>> sequences, ops::Device device) {
  if (index >= plan.micro_batches.size()) {
    throw InvalidArgument("build_rank_micro_batch: micro-batch " + std::to_string(index) + " of a plan with " +
                          std::to_string(plan.micro_batches.size()));
  }
  const MicroBatch& mb = plan.micro_batches[index];
  const auto at = std::find(mb.ranks.begin(), mb.ranks.end(), rank);
  if (at == mb.ranks.end()) {
    throw InvalidArgument("build_rank_micro_batch: rank " + std::to_string(rank) + " is not in micro-batch " +
                          std::to_string(index));
  }
  auto sequence = [&](std::uint32_t s) -> const std::vector<std::int32_t>& {
    if (s >= sequences.size()) {
      throw InvalidArgument("build_rank_micro_batch: micro-batch " + std::to_string(index) + " names sequence " +
                            std::to_string(s) + " of a batch of " + std::to_string(sequences.size()));
    }
    return sequences[s];
  };

  RankMicroBatch out;
  RowWriter rows;
  std::vector<std::uint32_t> whole;
  if (mb.ranks.size() == 1) {
    whole = mb.sequences;
  } else {
    out.ring.ring = mb.ranks;
    out.ring.position = static_cast<int>(at - mb.ranks.begin());
    for (std::uint32_t s : mb.sequences) out.ring.lengths.push_back(static_cast<std::int64_t>(sequence(s).size()));
    const std::vector<TokenRange> a = out.ring.a_chunks(out.ring.position), b = out.ring.b_chunks(out.ring.position);
    for (std::size_t i = 0; i < mb.sequences.size(); ++i) rows.append(sequence(mb.sequences[i]), a[i].begin, a[i].end);
    for (std::size_t i = 0; i < mb.sequences.size(); ++i) rows.append(sequence(mb.sequences[i]), b[i].begin, b[i].end);
    for (const LocalSequence& l : mb.local) {
      if (l.rank == rank) whole.push_back(l.sequence);
    }
  }
  const auto shard_rows = static_cast<std::int32_t>(rows.tokens.size());
  out.local_cu.push_back(0);
  for (std::uint32_t s : whole) {
    const std::vector<std::int32_t>& seq = sequence(s);
    rows.append(seq, 0, static_cast<std::int64_t>(seq.size()));
    out.local_cu.push_back(static_cast<std::int32_t>(rows.tokens.size()) - shard_rows);
  }
  if (!out.sharded()) out.batch.cu_seqlens = out.local_cu;
  const auto n = static_cast<std::int64_t>(rows.tokens.size());
  out.batch.tokens = ops::Tensor::from_vector(rows.tokens, {n}).to(device);
  out.batch.targets = ops::Tensor::from_vector(rows.targets, {n}).to(device);
  out.batch.positions = ops::Tensor::from_vector(rows.positions, {n}).to(device);
  out.counted_targets = rows.counted;
  return out;
}

std::int64_t global_targets(std::span<const std::vector<std::int32_t>> sequences) {
  std::int64_t n = 0;
  for (const auto& s : sequences) n += std::max<std::int64_t>(0, static_cast<std::int64_t>(s.size()) - 1);
  return n;
}

}  // namespace hdp::mesh
